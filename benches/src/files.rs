//! Inputs for the `file_tools` bench (`search_files`, `patch`): a source
//! tree of Rust-like files, and single large files to edit.

use std::path::Path;

use crate::Rng;

const WORDS: &[&str] = &[
    "config", "buffer", "reader", "frame", "kernel", "session", "token", "value", "index",
    "result", "output", "limit", "state", "count", "path", "entry", "match", "line",
];

/// One line of Rust-like code, numbered so that every line is distinct.
fn code_line(rng: &mut Rng, n: usize) -> String {
    let a = WORDS[rng.below(WORDS.len() as u64) as usize];
    let b = WORDS[rng.below(WORDS.len() as u64) as usize];
    match rng.below(5) {
        0 => format!("    let {a}_{n} = {b}.len() + {};\n", rng.below(1000)),
        1 => format!("    if {a}.is_empty() {{ return Err(Error::{b}({n})); }}\n"),
        2 => format!("    // {a} {b}: keep the {a} bounded ({n})\n"),
        3 => format!("    {a}.push_str(&{b}.to_string()); // {n}\n"),
        _ => format!("    self.{a} = self.{b}.saturating_add({n});\n"),
    }
}

/// A source file of `lines` lines; every 1000th file (by `seed`) has one
/// `fn needle_<seed>()` line in the middle.
pub fn source_file(lines: usize, seed: u64) -> String {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut s = String::with_capacity(lines * 48);
    s.push_str("use std::fmt;\n\n");
    for n in 0..lines {
        if n % 40 == 0 {
            s.push_str(&format!(
                "pub fn item_{seed}_{n}() -> Result<(), Error> {{\n"
            ));
        }
        if seed.is_multiple_of(1000) && n == lines / 2 {
            s.push_str(&format!("pub fn needle_{seed}() {{}}\n"));
        }
        s.push_str(&code_line(&mut rng, n));
        if n % 40 == 39 {
            s.push_str("    Ok(())\n}\n\n");
        }
    }
    s
}

/// Writes `files` source files of `lines` lines each under `root`, spread
/// over nested directories, plus a `.gitignore`d `target/` holding as many
/// again (which a search must not read). Returns the bytes of the files a
/// search reads.
pub fn source_tree(root: &Path, files: usize, lines: usize) -> std::io::Result<u64> {
    std::fs::write(root.join(".gitignore"), "target/\n")?;
    let mut total = 0u64;
    for i in 0..files {
        let dir = root.join(format!("src/m{}/s{}", i % 16, i % 5));
        std::fs::create_dir_all(&dir)?;
        let body = source_file(lines, i as u64);
        total += body.len() as u64;
        std::fs::write(dir.join(format!("f{i}.rs")), &body)?;
        let ignored = root.join(format!("target/debug/m{}", i % 16));
        std::fs::create_dir_all(&ignored)?;
        std::fs::write(ignored.join(format!("f{i}.rs")), &body)?;
    }
    Ok(total)
}
