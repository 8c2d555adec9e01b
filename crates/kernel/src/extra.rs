//! Tools that come and go between cells, outside the registry's fixed set:
//! the tools a `serve` client registers (carried by each request) and the
//! tools of host-wide sources such as MCP servers ([`ToolSource`]).
//!
//! They are not part of the session key: a live kernel gets the new stub
//! module with its next cell and keeps its state. Each kernel remembers the
//! [`ExtraTools::fingerprint`] of the set its stubs were made for.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use toolcell_rpc::BoxFuture;
use toolcell_tools::DynTool;
use toolcell_tools::names::Unavailable;

/// A set of tools for one cell besides the registry's own.
#[derive(Clone, Default)]
pub struct ExtraTools {
    /// The tools, each with a unique name.
    pub tools: Vec<Arc<dyn DynTool>>,
    /// Sources whose tools are not known now (an MCP server that failed
    /// to start): their submodules raise `ToolError` with the message.
    pub unavailable: Vec<Unavailable>,
    /// Changes whenever the tools' definitions change without their names
    /// changing (a re-registration with a new schema, a server's refreshed
    /// list); part of the fingerprint.
    pub generation: u64,
    /// Warnings about the set (tools a source listed but left out, and
    /// why), for the `warning` of the first cell that gets these tools.
    pub notices: Vec<String>,
}

impl std::fmt::Debug for ExtraTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraTools")
            .field(
                "tools",
                &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .field("unavailable", &self.unavailable)
            .field("generation", &self.generation)
            .field("notices", &self.notices)
            .finish()
    }
}

impl ExtraTools {
    /// A set of `tools` (definitions identified by `generation`).
    pub fn new(tools: Vec<Arc<dyn DynTool>>, generation: u64) -> Self {
        Self {
            tools,
            unavailable: Vec::new(),
            generation,
            notices: Vec::new(),
        }
    }

    /// Whether the set is empty (no tool, no unavailable source).
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.unavailable.is_empty()
    }

    /// Adds `other`'s tools and sources (the generation mixes both).
    pub fn extend(&mut self, other: ExtraTools) {
        self.tools.extend(other.tools);
        self.unavailable.extend(other.unavailable);
        self.notices.extend(other.notices);
        self.generation = mix(self.generation, other.generation);
    }

    /// Identifies what the stub module is made of: names, sources,
    /// generation. Equal fingerprints need no new stubs.
    pub fn fingerprint(&self) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.generation.hash(&mut h);
        for t in &self.tools {
            t.name().hash(&mut h);
        }
        for u in &self.unavailable {
            u.namespace.hash(&mut h);
            u.message.hash(&mut h);
        }
        // Never 0: that is "no extra tools".
        h.finish() | 1
    }

    /// Whether `name` (as a request's `tools` may give it: `tool`,
    /// `SOURCE.tool` or `SOURCE.*`) names something in this set.
    pub fn names(&self, name: &str) -> bool {
        if let Some(ns) = name.strip_suffix(".*") {
            return self.tools.iter().any(|t| t.namespace() == Some(ns))
                || self.unavailable.iter().any(|u| u.namespace == ns);
        }
        self.tools.iter().any(|t| t.name() == name)
            || self.unavailable.iter().any(|u| {
                name.strip_prefix(u.namespace.as_str())
                    .is_some_and(|r| r.starts_with('.'))
            })
    }

    /// Only what `wanted` (a request's `tools`) names.
    #[must_use]
    pub fn narrowed(&self, wanted: &[String]) -> Self {
        let picks = |t: &Arc<dyn DynTool>| {
            wanted.iter().any(|w| {
                w == t.name()
                    || t.namespace()
                        .is_some_and(|ns| w.strip_suffix(".*") == Some(ns))
            })
        };
        Self {
            tools: self.tools.iter().filter(|t| picks(t)).cloned().collect(),
            unavailable: self
                .unavailable
                .iter()
                .filter(|u| {
                    wanted.iter().any(|w| {
                        w.strip_prefix(u.namespace.as_str())
                            .is_some_and(|r| r.starts_with('.'))
                    })
                })
                .cloned()
                .collect(),
            generation: self.generation,
            notices: self.notices.clone(),
        }
    }
}

fn mix(a: u64, b: u64) -> u64 {
    a.rotate_left(17) ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A host-wide source of tools, asked before every cell (MCP servers: it
/// starts them lazily and waits for them within their startup timeout).
pub trait ToolSource: Send + Sync + 'static {
    /// The source's tools now.
    fn tools(&self) -> BoxFuture<'_, ExtraTools>;
    /// Stops whatever the source started (called when the host's registry
    /// shuts down).
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

impl std::fmt::Debug for dyn ToolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn ToolSource")
    }
}
