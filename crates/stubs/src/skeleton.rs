//! The one skeleton of the stub modules (Python, R, JavaScript): which
//! names the module defines, claimed once for every language — one function
//! per top-level tool (in the order given), one module per outside source
//! (in name order, its members sorted), one refusing module per source that
//! is down — so that two tools mapping to one name are an error naming both
//! ([`plan`]). A language says how each part is written ([`Emit`]) and, when
//! its layout differs (Python lists `__all__` first and defines the source
//! modules before the functions), how the parts are laid out
//! ([`Emit::module`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use toolcell_tools::DynTool;
use toolcell_tools::names::{NameClaims, StubError, Unavailable};
use toolcell_tools::screen::local_name;

/// A tool and its name in the module.
pub(crate) type Named<'a> = (&'a Arc<dyn DynTool>, String);

/// A source of tools in the module.
pub(crate) struct Source<'a> {
    /// The source's own name.
    pub(crate) ns: &'a str,
    /// Its module's name.
    pub(crate) ident: String,
    /// Its tools, named; `Err` when it is down.
    pub(crate) members: Result<Vec<Named<'a>>, &'a Unavailable>,
}

/// Every name a stub module defines, claimed.
pub(crate) struct Plan<'a> {
    /// Top-level tools, in the order given.
    pub(crate) top: Vec<Named<'a>>,
    /// Sources that are up (in name order), then those that are down (in
    /// the order given).
    pub(crate) sources: Vec<Source<'a>>,
}

/// How one language writes the parts of its stub module.
pub(crate) trait Emit {
    /// `Python`, `R`, `JavaScript` (in error messages).
    const LANGUAGE: &'static str;
    /// The hand-written part, first in the module.
    const PRELUDE: &'static str;
    /// Whether a source's members are sorted by their name in the module
    /// (Python) rather than by the tool's name (R, JavaScript).
    const MEMBERS_BY_IDENT: bool = false;
    /// The name of a top-level tool or of a source's module.
    fn top_name(name: &str) -> String;
    /// The name of a source's tool inside the source's module.
    fn member_name(name: &str) -> String;
    /// Writes a top-level tool as `ident`.
    fn tool(out: &mut String, tool: &dyn DynTool, ident: &str) -> Result<(), StubError>;
    /// Writes the module `ident` of source `ns` with its `members`.
    fn source(
        out: &mut String,
        ns: &str,
        ident: &str,
        members: &[Named<'_>],
    ) -> Result<(), StubError>;
    /// Writes the module `ident` of a source that is down.
    fn unavailable(out: &mut String, source: &Unavailable, ident: &str);
    /// The whole module: by default the prelude, the top-level tools, then
    /// the sources.
    fn module(plan: &Plan<'_>) -> Result<String, StubError> {
        let mut out = String::with_capacity(Self::PRELUDE.len() + plan.top.len() * 1024);
        out.push_str(Self::PRELUDE);
        for (t, ident) in &plan.top {
            Self::tool(&mut out, t.as_ref(), ident)?;
        }
        for s in &plan.sources {
            match &s.members {
                Ok(members) => Self::source(&mut out, s.ns, &s.ident, members)?,
                Err(down) => Self::unavailable(&mut out, down, &s.ident),
            }
        }
        Ok(out)
    }
}

/// Claims every name of the module of language `E` for `tools` and the
/// sources that are down.
///
/// # Errors
/// [`StubError::SameIdentifier`] when two tools (or a source and a tool)
/// map to one name.
pub(crate) fn plan<'a, E: Emit>(
    tools: &'a [Arc<dyn DynTool>],
    unavailable: &'a [Unavailable],
) -> Result<Plan<'a>, StubError> {
    let mut names = NameClaims::new(E::LANGUAGE);
    let mut top = Vec::new();
    let mut spaces: BTreeMap<&str, Vec<Named<'a>>> = BTreeMap::new();
    for t in tools {
        match t.namespace() {
            None => top.push((t, names.claim("", E::top_name(t.name()), t.name())?)),
            Some(ns) => {
                let local = E::member_name(local_name(t.as_ref(), ns));
                let ident = names.claim(ns, local, t.name())?;
                spaces.entry(ns).or_default().push((t, ident));
            }
        }
    }
    let mut sources = Vec::new();
    for (ns, mut members) in spaces {
        if E::MEMBERS_BY_IDENT {
            members.sort_by(|a, b| a.1.cmp(&b.1));
        } else {
            members.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        }
        let ident = names.claim("", E::top_name(ns), &format!("source {ns}"))?;
        sources.push(Source {
            ns,
            ident,
            members: Ok(members),
        });
    }
    for u in unavailable {
        if sources.iter().any(|s| s.ns == u.namespace) {
            continue;
        }
        let ns = u.namespace.as_str();
        let ident = names.claim("", E::top_name(ns), &format!("source {ns}"))?;
        sources.push(Source {
            ns,
            ident,
            members: Err(u),
        });
    }
    Ok(Plan { top, sources })
}

/// The stub module of language `E` for `tools` and the sources that are
/// down.
///
/// # Errors
/// [`StubError::SameIdentifier`] when two tools (or a source and a tool, or
/// two parameters of a tool) map to one name.
pub(crate) fn generate<E: Emit>(
    tools: &[Arc<dyn DynTool>],
    unavailable: &[Unavailable],
) -> Result<String, StubError> {
    E::module(&plan::<E>(tools, unavailable)?)
}
