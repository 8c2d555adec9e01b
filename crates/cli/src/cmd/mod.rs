//! One module per subcommand.

pub mod config;
pub mod daemon;
pub mod exec;
pub mod export;
pub mod frames;
pub mod history;
pub mod mcp;
pub mod repl;
pub mod schema;
pub mod serve;
pub mod stubs;
pub mod tools;
