//! Every example in README.md and docs/ that shows output produces it.
//!
//! An example is a fenced block with lines that start with `$ `: each such
//! line is a command (continued by a trailing `\` or a heredoc), and the
//! lines after it, up to the next command, are what it prints (stdout and
//! stderr together, as a terminal shows them). The commands of one block
//! run in order, through `sh`, in one fresh directory that is also their
//! `HOME` and `XDG_*` (so a block's sessions and daemon are its own), with
//! the `toolcell` under test first on `PATH`.
//!
//! In the shown output, a line `...` stands for any number of lines and
//! `...` inside a line for any text. Both sides are compared after
//! normalising what differs from run to run: kernel ids, durations such as
//! `0.13s`, timestamps, `duration_seconds`/`cpu_seconds`/`peak_rss_kb`
//! values, trailing spaces and runs of spaces.
//!
//! A block that cannot run this way (typed at a terminal, or needing a
//! model or a remote machine) says so on the line before its fence:
//! `<!-- not run: why, and which test covers it -->`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use regex::Regex;

use crate::common::{BIN, Env, finish};

struct Example {
    place: String,
    steps: Vec<Step>,
}

struct Step {
    command: String,
    shown: Vec<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pages users read: README.md and docs/*.md.
fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The examples of one page, and the blocks it marks as not run.
fn examples(page: &Path) -> (Vec<Example>, Vec<String>) {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page
        .strip_prefix(repo_root())
        .unwrap_or(page)
        .display()
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    let heredoc = Regex::new(r#"<<-?\s*['"]?([A-Za-z_]+)['"]?"#).unwrap();
    let (mut found, mut skipped) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with("```") {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        while end < lines.len() && !lines[end].starts_with("```") {
            end += 1;
        }
        let body = &lines[start + 1..end.min(lines.len())];
        i = end + 1;
        if !body.iter().any(|l| l.starts_with("$ ")) {
            continue;
        }
        let place = format!("{name}:{}", start + 1);
        let before = lines[..start].iter().rev().find(|l| !l.trim().is_empty());
        if let Some(reason) = before.and_then(|l| l.trim().strip_prefix("<!-- not run:")) {
            let reason = reason.trim_end_matches("-->").trim();
            assert!(!reason.is_empty(), "{place}: `not run` needs a reason");
            skipped.push(format!("{place}: {reason}"));
            continue;
        }
        let mut steps: Vec<Step> = Vec::new();
        let mut j = 0;
        while j < body.len() {
            let line = body[j];
            j += 1;
            let Some(cmd) = line.strip_prefix("$ ") else {
                let step = steps
                    .last_mut()
                    .unwrap_or_else(|| panic!("{place}: output before the first `$ ` line"));
                step.shown.push(line.to_string());
                continue;
            };
            let mut command = cmd.to_string();
            while command.ends_with('\\') && j < body.len() {
                command.push('\n');
                command.push_str(body[j]);
                j += 1;
            }
            if let Some(word) = heredoc.captures(cmd).map(|c| c[1].to_string()) {
                while j < body.len() {
                    command.push('\n');
                    command.push_str(body[j]);
                    j += 1;
                    if body[j - 1] == word {
                        break;
                    }
                }
            }
            steps.push(Step {
                command,
                shown: Vec::new(),
            });
        }
        found.push(Example { place, steps });
    }
    (found, skipped)
}

/// What varies from run to run, made equal.
fn normalise(line: &str) -> String {
    static RULES: std::sync::OnceLock<Vec<(Regex, &'static str)>> = std::sync::OnceLock::new();
    let rules = RULES.get_or_init(|| {
        [
            (r"k-[0-9a-f]{16}", "k-ID"),
            (r"\b\d+(\.\d+)?s\b", "Ns"),
            (r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?", "TIME"),
            (
                r#""(duration_seconds|cpu_seconds|peak_rss_kb|started_at|finished_at)":\s*[0-9.e+-]+"#,
                r#""$1": N"#,
            ),
            (r"\s+", " "),
        ]
        .into_iter()
        .map(|(re, to)| (Regex::new(re).unwrap(), to))
        .collect()
    });
    let mut s = line.trim_end().to_string();
    for (re, to) in rules {
        s = re.replace_all(&s, *to).into_owned();
    }
    s
}

/// Whether `actual` is what `shown` shows (see the module doc).
fn matches(shown: &[String], actual: &[String]) -> bool {
    let Some((first, rest)) = shown.split_first() else {
        return actual.is_empty();
    };
    if matches!(first.trim(), "..." | "…") {
        return (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]));
    }
    let Some((line, more)) = actual.split_first() else {
        return false;
    };
    let pattern = normalise(first)
        .split("...")
        .map(regex::escape)
        .collect::<Vec<_>>()
        .join(".*");
    Regex::new(&format!("^{pattern}$"))
        .unwrap()
        .is_match(&normalise(line))
        && matches(rest, more)
}

/// Runs one example's commands; `Err` says what differed.
fn run(example: &Example) -> Result<(), String> {
    let env = Env::new();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for step in &example.steps {
        let mut sh = env.cmd_of(Path::new("sh"));
        sh.arg("-c")
            .arg(format!("exec 2>&1\n{}\n", step.command))
            .env("PATH", &path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = finish(sh.spawn().unwrap(), Duration::from_secs(120));
        let actual: Vec<String> = out.stdout.lines().map(str::to_string).collect();
        if !matches(&step.shown, &actual) {
            return Err(format!(
                "{}: `$ {}`\n--- shown ---\n{}\n--- printed ---\n{}{}",
                example.place,
                step.command,
                step.shown.join("\n"),
                out.stdout,
                out.stderr
            ));
        }
    }
    Ok(())
}

#[test]
fn every_example_with_output_prints_what_it_shows() {
    let (mut all, mut skipped) = (Vec::new(), Vec::new());
    for page in pages() {
        let (found, not_run) = examples(&page);
        all.extend(found);
        skipped.extend(not_run);
    }
    assert!(
        all.len() >= 6,
        "only {} examples found: is the parser still reading the pages?",
        all.len()
    );
    let failures: Vec<String> = all.iter().filter_map(|e| run(e).err()).collect();
    for s in &skipped {
        println!("not run: {s}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples differ from what they show:\n\n{}",
        failures.len(),
        all.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_matcher_takes_wildcards_and_normalises_what_varies() {
    let lines = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let shown = lines(&[
        "{\"status\": \"success\", ...}",
        "...",
        "[toolcell] success in 0.01s · reused kernel k-a76d4f494f456322",
    ]);
    let printed = lines(&[
        "{\"status\": \"success\", \"output\": \"x\"}",
        "one",
        "two",
        "[toolcell] success in 1.25s · reused kernel k-0123456789abcdef",
    ]);
    assert!(matches(&shown, &printed));
    assert!(!matches(&shown, &printed[..3]));
    assert!(!matches(&lines(&["42"]), &lines(&["43"])));
    assert!(!matches(&lines(&[]), &lines(&["anything"])));
    assert!(matches(&lines(&["a  b   "]), &lines(&["a b"])));
}
