//! One module per subcommand.

pub mod frames;
