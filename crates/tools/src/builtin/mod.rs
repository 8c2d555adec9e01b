//! The built-in tools, one file each (the web tools share a directory).
//! Each file registers its tool with `register_tool!`; nothing else needs
//! to list them. The web tools exist only with the `web` feature.

mod patch;
mod read_file;
mod search_files;
mod terminal;
#[cfg(feature = "web")]
mod web;
mod write_file;
