//! One module per subcommand.

pub(crate) mod config;
pub(crate) mod daemon;
pub(crate) mod exec;
pub(crate) mod export;
pub(crate) mod frames;
pub(crate) mod history;
pub(crate) mod mcp;
pub(crate) mod repl;
pub(crate) mod schema;
pub(crate) mod serve;
pub(crate) mod stubs;
pub(crate) mod tools;
