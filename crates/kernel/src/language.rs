//! The languages a kernel can run (SPEC §15): Python (the default), R and
//! JavaScript. Each has its runner script, its stub module (generated from
//! the same JSON Schemas) and its launch command; everything else — the
//! wire protocol, the frames, the output pipeline, the result — is shared.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use toolcell_tools::DynTool;
use toolcell_tools::stubs::{self, StubError, Unavailable};

/// The Python runner (SPEC §2–§3), written into each kernel's directory.
pub const RUNNER_PY: &str = include_str!("../runner/runner.py");
/// The R runner (same protocol; `Rscript`, R 4.x).
pub const RUNNER_R: &str = include_str!("../runner/runner.R");
/// The JavaScript runner (same protocol; `node` 18+, no packages).
pub const RUNNER_JS: &str = include_str!("../runner/runner.js");

/// The R bootstrap (`Rscript -e BOOTSTRAP <runner path>`): reads the runner
/// from fd 4 (the file the host created `O_EXCL | O_NOFOLLOW`; never its
/// path) and evaluates it in a private environment whose parent is the base
/// environment, so the cells' global environment starts empty.
pub const BOOTSTRAP_R: &str = "local({f<-file('/dev/fd/4',open='r',encoding='UTF-8');s<-readLines(f,warn=FALSE);close(f);e<-new.env(parent=baseenv());assign('.runner_path',commandArgs(TRUE)[1L],envir=e);eval(parse(text=s,keep.source=FALSE,encoding='UTF-8'),envir=e)})";

/// The JavaScript bootstrap (`node -e BOOTSTRAP <runner path>`): reads the
/// runner from fd 4 and runs it as a CommonJS module body.
pub const BOOTSTRAP_JS: &str = "const fs=require('fs');const s=fs.readFileSync(4,'utf8');fs.closeSync(4);const p=process.argv[1];require('vm').runInThisContext(require('module').wrap(s),{filename:p})(exports,require,module,p,require('path').dirname(p));";

/// A kernel's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Language {
    /// Python 3.8+ (the default).
    #[default]
    Python,
    /// R 4.x through `Rscript`.
    R,
    /// JavaScript through `node` 18+.
    JavaScript,
}

/// A language name no kernel speaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown language `{0}`: expected \"python\", \"r\" or \"javascript\"")]
pub struct UnknownLanguage(pub String);

impl Language {
    /// Every language, default first.
    pub const ALL: [Language; 3] = [Language::Python, Language::R, Language::JavaScript];

    /// `python`, `r` or `javascript` (the name in requests and results).
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::R => "r",
            Language::JavaScript => "javascript",
        }
    }

    /// A name as a person writes it: `python`/`py`, `r`/`R`,
    /// `javascript`/`js`/`node`.
    ///
    /// # Errors
    /// [`UnknownLanguage`] for anything else.
    pub fn parse(s: &str) -> Result<Self, UnknownLanguage> {
        match s.trim().to_ascii_lowercase().as_str() {
            "python" | "py" | "python3" => Ok(Language::Python),
            "r" => Ok(Language::R),
            "javascript" | "js" | "node" | "nodejs" => Ok(Language::JavaScript),
            _ => Err(UnknownLanguage(s.to_string())),
        }
    }

    /// What a sentence calls it: `Python`, `R`, `JavaScript`.
    pub fn label(self) -> &'static str {
        match self {
            Language::Python => "Python",
            Language::R => "R",
            Language::JavaScript => "JavaScript",
        }
    }

    /// The program looked up on `PATH` when none is configured.
    pub fn default_program(self) -> &'static str {
        match self {
            Language::Python => "python3",
            Language::R => "Rscript",
            Language::JavaScript => "node",
        }
    }

    /// The `[execution]` key naming its interpreter.
    pub fn config_key(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::R => "r",
            Language::JavaScript => "node",
        }
    }

    /// How to install the interpreter on a Debian-like system (for errors).
    pub fn install_hint(self) -> &'static str {
        match self {
            Language::Python => "apt-get install python3",
            Language::R => "apt-get install r-base-core r-cran-jsonlite",
            Language::JavaScript => "apt-get install nodejs (node 18 or later)",
        }
    }

    /// The runner's file name in the kernel directory and its source.
    pub fn runner(self) -> (&'static str, &'static str) {
        match self {
            Language::Python => ("runner.py", RUNNER_PY),
            Language::R => ("runner.R", RUNNER_R),
            Language::JavaScript => ("runner.js", RUNNER_JS),
        }
    }

    /// The stub module's file name in the kernel directory.
    pub fn stub_file(self) -> &'static str {
        match self {
            Language::Python => "toolcell_tools.py",
            Language::R => "toolcell_tools.R",
            Language::JavaScript => "toolcell_tools.js",
        }
    }

    /// The stub module for `tools` (and outside sources that are down).
    ///
    /// # Errors
    /// [`StubError`] when two names map to one identifier.
    pub fn stub_source(
        self,
        tools: &[Arc<dyn DynTool>],
        unavailable: &[Unavailable],
    ) -> Result<String, StubError> {
        match self {
            Language::Python => stubs::stub_module_with(tools, unavailable),
            Language::R => toolcell_tools::stubs_r::stub_module(tools, unavailable),
            Language::JavaScript => toolcell_tools::stubs_js::stub_module(tools, unavailable),
        }
    }

    /// The interpreter's arguments: a bootstrap that reads the runner from
    /// fd 4, then the runner's path (for messages and `__file__`).
    pub fn launch_args(self, runner_path: &Path) -> Vec<OsString> {
        let (flags, bootstrap): (&[&str], &str) = match self {
            Language::Python => (&["-u", "-c"], crate::kernel::BOOTSTRAP),
            Language::R => (&["--no-echo", "--no-restore", "-e"], BOOTSTRAP_R),
            Language::JavaScript => (&["-e"], BOOTSTRAP_JS),
        };
        let mut args: Vec<OsString> = flags.iter().map(OsString::from).collect();
        args.push(bootstrap.into());
        args.push(runner_path.as_os_str().to_owned());
        args
    }

    /// Whether the tool server must listen on TCP: R's base library has no
    /// Unix-socket client.
    pub fn needs_tcp(self) -> bool {
        self == Language::R
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Language {
    type Err = UnknownLanguage;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Language::parse(s)
    }
}

impl serde::Serialize for Language {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Language {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Language::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for l in Language::ALL {
            assert_eq!(Language::parse(l.as_str()), Ok(l));
        }
        assert_eq!(Language::parse("JS"), Ok(Language::JavaScript));
        assert_eq!(Language::parse(" R "), Ok(Language::R));
        assert!(Language::parse("ruby").is_err());
    }

    #[test]
    fn launch_ends_with_the_runner_path() {
        for l in Language::ALL {
            let args = l.launch_args(Path::new("/k/runner"));
            assert_eq!(args.last().map(|a| a.to_str()), Some(Some("/k/runner")));
        }
    }
}
