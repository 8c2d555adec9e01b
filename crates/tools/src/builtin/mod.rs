//! The built-in tools of SPEC §8, one file each. Each file registers its
//! tool with `register_tool!`; nothing else needs to list them.

mod patch;
mod read_file;
mod search_files;
mod terminal;
mod web;
mod write_file;
