//! The registry of tools and its implementation of the rpc dispatch interface.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use toolcell_rpc::{BoxFuture, CellContext, Dispatch, ToolFailure};

use crate::tool::{DynTool, ToolContext, ToolEntry, ToolError, ToolSettings};

/// Why a registry could not be built or extended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two tools share a name.
    #[error("two tools are named `{0}`; tool names must be unique")]
    Duplicate(String),
    /// A name cannot name a tool (empty, over 128 bytes, or with control
    /// characters or whitespace).
    #[error(
        "tool name {0:?} cannot be used: a name is 1 to 128 characters without whitespace or \
         control characters"
    )]
    BadName(String),
    /// Two tools whose names map to one function name in Python, R or
    /// JavaScript.
    #[error("tools `{first}` and `{second}` both map to the {language} name `{ident}`; rename one")]
    SameIdentifier {
        /// The tool registered first.
        first: String,
        /// The tool being added.
        second: String,
        /// `Python`, `R` or `JavaScript`.
        language: &'static str,
        /// The name both map to.
        ident: String,
    },
    /// A tool's JSON Schema cannot be used.
    #[error("tool `{tool}`: {problem}")]
    BadSchema {
        /// The tool.
        tool: String,
        /// What is wrong.
        problem: String,
    },
    /// A tool asked for is not in the registry.
    #[error("unknown tool `{name}`; known tools: {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
}

/// All tools a host knows, by name: the built-in ones registered at compile
/// time with [`register_tool!`](crate::register_tool), plus any an embedder
/// adds at run time.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn DynTool>>,
    /// (language, module, function name) → tool name.
    idents: BTreeMap<(&'static str, String, String), String>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.chars().any(|c| c.is_control() || c.is_whitespace())
}

impl ToolRegistry {
    /// An empty registry.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Every tool registered at compile time in the linked binary.
    ///
    /// Only tools whose crates are linked are seen: a binary that reads the
    /// registry must link this crate (`use toolcell_tools as _;`).
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] if two registered tools share a name.
    pub fn builtin() -> Result<Self, RegistryError> {
        let mut reg = Self::empty();
        for entry in inventory::iter::<ToolEntry> {
            reg.add(entry.build())?;
        }
        Ok(reg)
    }

    /// Adds a tool at run time: a built-in type ([`erase`](crate::erase)),
    /// a [`SchemaTool`](crate::SchemaTool), or any [`DynTool`].
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] for a name already registered,
    /// [`RegistryError::SameIdentifier`] for a name that maps to the same
    /// function name as a registered one in Python, R or JavaScript
    /// (`get-user`, `get_user`; `c` and `c_` in R), [`RegistryError::BadName`].
    pub fn add(&mut self, tool: Arc<dyn DynTool>) -> Result<(), RegistryError> {
        let name = tool.name().to_string();
        if !valid_name(&name) {
            return Err(RegistryError::BadName(name));
        }
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let keys: Vec<(&'static str, String, String)> = crate::names::Lang::ALL
            .iter()
            .map(|&lang| {
                let (module, ident) = crate::screen::tool_name(lang, tool.as_ref());
                (lang.label(), module, ident)
            })
            .collect();
        for key in &keys {
            if let Some(first) = self.idents.get(key) {
                return Err(RegistryError::SameIdentifier {
                    first: first.clone(),
                    second: name,
                    language: key.0,
                    ident: key.2.clone(),
                });
            }
        }
        for key in keys {
            self.idents.insert(key, name.clone());
        }
        self.tools.insert(name, tool);
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.tools.get(name)
    }

    /// All tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// All tools, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn DynTool>> {
        self.tools.values()
    }

    /// The names of the tools enabled when a configuration does not list
    /// them: those whose [`Tool::DEFAULT_ENABLED`](crate::Tool::DEFAULT_ENABLED)
    /// is true, sorted.
    pub fn default_enabled(&self) -> Vec<&str> {
        self.tools
            .values()
            .filter(|t| t.default_enabled())
            .map(|t| t.name())
            .collect()
    }

    /// The tools named in `enabled`, sorted by name, checking each exists.
    ///
    /// # Errors
    /// [`RegistryError::Unknown`] for the first name not in the registry.
    pub fn select<S: AsRef<str>>(
        &self,
        enabled: &[S],
    ) -> Result<Vec<Arc<dyn DynTool>>, RegistryError> {
        let mut out: Vec<Arc<dyn DynTool>> = Vec::new();
        for name in enabled {
            let name = name.as_ref();
            match self.tools.get(name) {
                Some(t) => {
                    if !out.iter().any(|o| o.name() == name) {
                        out.push(Arc::clone(t));
                    }
                }
                None => {
                    return Err(RegistryError::Unknown {
                        name: name.to_string(),
                        known: self.names().collect::<Vec<_>>().join(", "),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(out)
    }

    /// A dispatcher over this registry for one kernel's rpc server.
    pub fn dispatcher(&self, settings: ToolSettings) -> Arc<ToolDispatcher> {
        self.dispatcher_shared(Arc::new(settings))
    }

    /// [`dispatcher`](Self::dispatcher) with settings shared with others.
    pub fn dispatcher_shared(&self, settings: Arc<ToolSettings>) -> Arc<ToolDispatcher> {
        Arc::new(ToolDispatcher {
            tools: self.tools.clone(),
            settings,
        })
    }
}

/// The default `[tools] enabled` set: the names of the tools registered at
/// compile time in the linked binary (see [`ToolRegistry::builtin`]) whose
/// [`Tool::DEFAULT_ENABLED`](crate::Tool::DEFAULT_ENABLED) is true, sorted
/// and without duplicates. A tool added with one `register_tool!` line is in
/// it without any list to edit.
pub fn default_enabled_tools() -> Vec<String> {
    let mut names: Vec<String> = inventory::iter::<ToolEntry>
        .into_iter()
        .map(ToolEntry::build)
        .filter(|t| t.default_enabled())
        .map(|t| t.name().to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Implements the rpc crate's [`Dispatch`] over a registry: arguments are
/// validated against the tool's argument type (`bad_args` names the field),
/// then the tool runs with a [`ToolContext`] built from the calling cell.
#[derive(Debug)]
pub struct ToolDispatcher {
    tools: BTreeMap<String, Arc<dyn DynTool>>,
    settings: Arc<ToolSettings>,
}

impl ToolDispatcher {
    /// A dispatcher over just `tools` (e.g. tools from outside the
    /// registry, for one cell), sharing `settings`.
    pub fn over(tools: &[Arc<dyn DynTool>], settings: Arc<ToolSettings>) -> Arc<ToolDispatcher> {
        Arc::new(ToolDispatcher {
            tools: tools
                .iter()
                .map(|t| (t.name().to_string(), Arc::clone(t)))
                .collect(),
            settings,
        })
    }

    /// The settings calls run with.
    pub fn settings(&self) -> &ToolSettings {
        &self.settings
    }
}

impl Dispatch for ToolDispatcher {
    fn knows(&self, tool: &str) -> bool {
        self.tools.contains_key(tool)
    }

    fn blocked_params(&self, tool: &str) -> &[&'static str] {
        self.tools.get(tool).map_or(&[], |t| t.blocked_params())
    }

    fn validate(&self, tool: &str, args: &Value) -> Result<(), String> {
        match self.tools.get(tool) {
            Some(t) => t.validate(args),
            None => Err(format!("unknown tool `{tool}`")),
        }
    }

    fn call(
        &self,
        tool: &str,
        args: Value,
        cx: CellContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let Some(t) = self.tools.get(tool).cloned() else {
            let msg = format!("unknown tool `{tool}`");
            return Box::pin(async move { Err(ToolFailure::new(msg)) });
        };
        let tcx = ToolContext::from_cell(Arc::clone(&self.settings), &cx);
        Box::pin(async move {
            t.call(args, tcx).await.map_err(|e| match e {
                ToolError::Failed(m) => ToolFailure::new(m),
                other => ToolFailure::new(other.to_string()),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_printable_words() {
        assert!(valid_name("read_file"));
        assert!(valid_name("get-user"));
        assert!(valid_name("1x"));
        assert!(valid_name("Read.v2"));
        assert!(!valid_name(""));
        assert!(!valid_name("a b"));
        assert!(!valid_name("a\u{0}"));
        assert!(!valid_name(&"x".repeat(129)));
    }
}
