//! The one skeleton of the R and JavaScript stub modules: the prelude, one
//! function per top-level tool (in the order given), one module per outside
//! source (in name order, its members sorted), and one refusing module per
//! source that is down — every name claimed in its module as it comes, so
//! two tools that map to one name are an error naming both. A language says
//! only how each part is written ([`Emit`]).
//!
//! The Python module keeps a generator of its own: it lists `__all__`
//! before the functions, so it claims every name before it writes any.

use std::collections::BTreeMap;
use std::sync::Arc;

use toolcell_tools::DynTool;
use toolcell_tools::names::{NameClaims, StubError, Unavailable};
use toolcell_tools::screen::local_name;

/// How one language writes the parts of its stub module.
pub(crate) trait Emit {
    /// `R`, `JavaScript` (in error messages).
    const LANGUAGE: &'static str;
    /// The hand-written part, first in the module.
    const PRELUDE: &'static str;
    /// The name of a top-level tool or of a source's module.
    fn top_name(name: &str) -> String;
    /// The name of a source's tool inside the source's module.
    fn member_name(name: &str) -> String;
    /// Writes a top-level tool as `ident`.
    fn tool(out: &mut String, tool: &dyn DynTool, ident: &str) -> Result<(), StubError>;
    /// Writes the module `ident` of source `ns` with its `members` (each
    /// with its name in the module).
    fn source(
        out: &mut String,
        ns: &str,
        ident: &str,
        members: &[(&Arc<dyn DynTool>, String)],
    ) -> Result<(), StubError>;
    /// Writes the module `ident` of a source that is down.
    fn unavailable(out: &mut String, source: &Unavailable, ident: &str);
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
    let mut out = String::with_capacity(E::PRELUDE.len() + tools.len() * 1024);
    out.push_str(E::PRELUDE);
    let mut names = NameClaims::new(E::LANGUAGE);
    let mut spaces: BTreeMap<&str, Vec<&Arc<dyn DynTool>>> = BTreeMap::new();
    for t in tools {
        match t.namespace() {
            None => {
                let ident = names.claim("", E::top_name(t.name()), t.name())?;
                E::tool(&mut out, t.as_ref(), &ident)?;
            }
            Some(ns) => spaces.entry(ns).or_default().push(t),
        }
    }
    for (ns, members) in &spaces {
        let ident = names.claim("", E::top_name(ns), &format!("source {ns}"))?;
        let mut sorted = members.clone();
        sorted.sort_by(|a, b| a.name().cmp(b.name()));
        let mut named = Vec::with_capacity(sorted.len());
        for t in sorted {
            let local = names.claim(ns, E::member_name(local_name(t.as_ref(), ns)), t.name())?;
            named.push((t, local));
        }
        E::source(&mut out, ns, &ident, &named)?;
    }
    for u in unavailable {
        if spaces.contains_key(u.namespace.as_str()) {
            continue;
        }
        let ident = names.claim(
            "",
            E::top_name(&u.namespace),
            &format!("source {}", u.namespace),
        )?;
        E::unavailable(&mut out, u, &ident);
    }
    Ok(out)
}
