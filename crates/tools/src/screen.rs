//! Which tools fit together in one stub module of every language: a tool
//! whose name (in Python, R or JavaScript) another has already, or two of
//! whose parameters map to one name, is left out with a message naming
//! both. The registry checks each tool here when it is added; the kernel,
//! `toolcell tools` and the `execute_code` description screen the whole
//! set before a module is written.

use std::sync::Arc;

use crate::names::{Lang, StubError, Unavailable};
use crate::schema::{self, Param};
use crate::tool::DynTool;

/// Checks that no two parameters of `tool` map to one parameter name in
/// Python or R (JavaScript passes the keys themselves).
///
/// # Errors
/// [`StubError::SameIdentifier`] naming both properties and the language.
pub fn check_params(tool: &str, params: &[Param]) -> Result<(), StubError> {
    check_params_in(tool, params, &Lang::ALL)
}

/// [`check_params`] for some languages only.
pub fn check_params_in(tool: &str, params: &[Param], langs: &[Lang]) -> Result<(), StubError> {
    for &lang in langs {
        let mut seen: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        for p in params {
            let Some(ident) = lang.param_name(&p.key) else {
                continue;
            };
            if let Some(first) = seen.insert(ident.clone(), &p.key) {
                return Err(StubError::SameIdentifier {
                    what: format!("properties of tool `{tool}`"),
                    language: lang.label(),
                    first: first.to_string(),
                    second: p.key.clone(),
                    ident,
                });
            }
        }
    }
    Ok(())
}

/// `(module, name)` of `tool` in `lang` (`""`: the top level).
pub fn tool_name(lang: Lang, tool: &dyn DynTool) -> (String, String) {
    match tool.namespace() {
        None => (String::new(), lang.top_name(tool.name())),
        Some(ns) => (ns.to_string(), lang.member_name(local_name(tool, ns))),
    }
}

/// What [`screen`] kept of a set of tools.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Screened {
    /// The tools that fit together in one stub module of every language, in
    /// the order given.
    pub tools: Vec<Arc<dyn DynTool>>,
    /// The sources that are down whose module names are free.
    pub unavailable: Vec<Unavailable>,
    /// One message for each tool or source left out, naming it, the one
    /// that keeps the name, and the name.
    pub dropped: Vec<String>,
}

impl std::fmt::Debug for Screened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screened")
            .field(
                "tools",
                &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .field("unavailable", &self.unavailable)
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// The tools (and down sources) of `tools` and `unavailable` that can be in
/// one stub module together, in Python, R and JavaScript alike: a tool
/// whose function name in any language is already taken (by an earlier
/// tool, or by a source's module), a tool two of whose parameters map to
/// one name, and a source whose module name is taken are left out, each
/// with a message in [`Screened::dropped`]. Earlier tools win, so put the
/// host's own tools first; what one source lists can then only cost that
/// source's own tools. With the result, [`stub_module_with`] and the R and
/// JavaScript generators never fail.
pub fn screen(tools: &[Arc<dyn DynTool>], unavailable: &[Unavailable]) -> Screened {
    use std::collections::HashMap;
    // (language, module, name) → who has it.
    let mut taken: HashMap<(&'static str, String, String), String> = HashMap::new();
    let mut out = Screened::default();
    // Top-level tools first (as the generators claim them), then sources.
    let (top, sourced): (Vec<_>, Vec<_>) = tools.iter().partition(|t| t.namespace().is_none());
    let mut kept: Vec<&Arc<dyn DynTool>> = Vec::with_capacity(tools.len());
    // The first wanted name someone has: (index, who, language, name).
    let clash = |taken: &HashMap<(&'static str, String, String), String>,
                 wanted: &[(&'static str, String, String)]|
     -> Option<(usize, String, &'static str, String)> {
        wanted.iter().enumerate().find_map(|(i, k)| {
            taken
                .get(k)
                .map(|first| (i, first.clone(), k.0, k.2.clone()))
        })
    };
    let source_key = |ns: &str| ("source", String::new(), ns.to_string());
    for t in top.into_iter().chain(sourced) {
        let name = t.name();
        if let Err(e) = check_params(name, &schema::params(t.as_ref())) {
            out.dropped.push(format!("tool `{name}` left out: {e}"));
            continue;
        }
        // The tool's own names, then its source's module names if the
        // source has no module yet.
        let mut wanted: Vec<(&'static str, String, String)> = Lang::ALL
            .iter()
            .map(|lang| {
                let (module, ident) = tool_name(*lang, t.as_ref());
                (lang.label(), module, ident)
            })
            .collect();
        let own = wanted.len();
        let new_source = t
            .namespace()
            .filter(|ns| !taken.contains_key(&source_key(ns)));
        if let Some(ns) = new_source {
            wanted.extend(
                Lang::ALL
                    .iter()
                    .map(|lang| (lang.label(), String::new(), lang.top_name(ns))),
            );
        }
        if let Some((i, first, language, ident)) = clash(&taken, &wanted) {
            let what = match new_source {
                Some(ns) if i >= own => format!("the module of its source `{ns}`"),
                _ => "its function".to_string(),
            };
            out.dropped.push(format!(
                "tool `{name}` left out: {what} would have the {language} name `{ident}`, \
                 which {first} has already"
            ));
            continue;
        }
        let mut wanted = wanted.into_iter();
        for k in wanted.by_ref().take(own) {
            taken.insert(k, format!("`{name}`"));
        }
        if let Some(ns) = new_source {
            for k in wanted {
                taken.insert(k, format!("the module of source `{ns}`"));
            }
            taken.insert(source_key(ns), String::new());
        }
        kept.push(t);
    }
    out.tools = kept.into_iter().cloned().collect();
    for u in unavailable {
        let ns = u.namespace.as_str();
        if taken.contains_key(&source_key(ns)) {
            // Its module exists already (with the tools of its last listing).
            continue;
        }
        let wanted: Vec<(&'static str, String, String)> = Lang::ALL
            .iter()
            .map(|lang| (lang.label(), String::new(), lang.top_name(ns)))
            .collect();
        if let Some((_, first, language, ident)) = clash(&taken, &wanted) {
            out.dropped.push(format!(
                "source `{ns}` left out: its module would have the {language} name `{ident}`, \
                 which {first} has already"
            ));
            continue;
        }
        for k in wanted {
            taken.insert(k, format!("the module of source `{ns}`"));
        }
        taken.insert(source_key(ns), String::new());
        out.unavailable.push(u.clone());
    }
    out
}

/// The local part of a namespaced tool's name (`fs.read` → `read`).
pub fn local_name<'a>(tool: &'a dyn DynTool, namespace: &str) -> &'a str {
    tool.name()
        .strip_prefix(namespace)
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(tool.name())
}
