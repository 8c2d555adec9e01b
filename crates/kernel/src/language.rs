//! The languages a kernel can run (docs/languages.md): Python (the default), R
//! and JavaScript. Each has its runner script, its stub module (generated from
//! the same JSON Schemas) and its launch command; everything else — the wire
//! protocol, the frames, the output pipeline, the result — is shared.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use toolcell_tools::DynTool;
use toolcell_tools::names::{StubError, Unavailable};

/// The Python runner (docs/protocol.md), written into each kernel's directory.
pub const RUNNER_PY: &str = include_str!("../runner/runner.py");
/// The R runner (same protocol; `Rscript`, R 4.x).
pub const RUNNER_R: &str = include_str!("../runner/runner.R");
/// The JavaScript runner (same protocol; `node` 18+, no packages).
pub const RUNNER_JS: &str = include_str!("../runner/runner.js");

/// The R bootstrap (`Rscript --no-echo --no-restore -e BOOTSTRAP [kernel
/// dir]`), the same locally and on a remote. It starts the *relay* —
/// `perl` where there is one, else `awk` (`mawk -W interactive` where there
/// is one, so lines pass at once; its line reading is quadratic in the line
/// length), with SIGINT ignored — which alone reads the host's requests on
/// stdin: it
/// forwards each line to R through a pipe, turns `{"type":"interrupt"}` into
/// SIGINT for R (its process group when R leads one), and at EOF (the host
/// is gone) kills that group at once, even during a busy cell. R reads the
/// relay's pid, then `<len>\n<runner><len>\n<stub module>` through the
/// relay, and evaluates the runner in a private environment whose parent is
/// the base environment (the cells' global environment starts empty). No
/// backslash and no `~` in it: R's front-end script passes `-e` through
/// `echo` and rewrites spaces as `~+~`.
pub const BOOTSTRAP_R: &str = r#"local({p<-pipe(r"[trap '' INT;echo $$;read -r a b c d g e </proc/$PPID/stat;K=$PPID;[ "$g" = $PPID ]&&K=-$PPID;command -v perl >/dev/null&&exec 2>/dev/null perl -e '$|=1;$k=shift;while(<STDIN>){if($_ eq qq({"type":"interrupt"}).chr(10)){kill(q(INT),$k);next}print}kill(q(KILL),$k)' -- $K;A=awk;command -v mawk >/dev/null&&A='mawk -W interactive';exec 2>/dev/null $A -v K=$K '/^..type.:.interrupt.[}]$/{system("kill -INT " K);next}{print;fflush()}END{system("kill -KILL " K)}']",'rb');l<-function(){x<-readLines(p,1L);if(length(x)!=1L){message('toolcell: the R runner got no request relay (it needs sh and awk) or no runner');quit('no',3L)};x};g<-function(){n<-as.integer(l());if(is.na(n))quit('no',3L);b<-readBin(p,'raw',n);if(length(b)<n)quit('no',3L);s<-rawToChar(b);Encoding(s)<-'UTF-8';s};e<-new.env(parent=baseenv());e$.relay<-p;e$.relay_pid<-as.integer(l());s<-g();e$.stubs<-g();e$.kdir<-commandArgs(TRUE)[1L];eval(parse(text=s,keep.source=FALSE,encoding='UTF-8'),envir=e)})"#;

/// The JavaScript bootstrap (`node -e BOOTSTRAP [kernel dir]`), the same
/// locally and on a remote: reads `<len>\n<runner><len>\n<stub module>` from
/// stdin with plain `read`s (never a byte past them: the requests follow on
/// the same pipe) and runs the runner as a CommonJS module body with
/// `module.toolcell = {stubs, kdir}`.
pub const BOOTSTRAP_JS: &str = r#"{const fs=require('fs');const rd=(b,o,n)=>{for(;;){try{return fs.readSync(0,b,o,n)}catch(e){if(e.code!=='EAGAIN')throw e;Atomics.wait(new Int32Array(new SharedArrayBuffer(4)),0,0,1)}}};const g=()=>{let h='';const c=Buffer.alloc(1);while(!h.endsWith('\n')){if(rd(c,0,1)!==1||h.length>12)process.exit(3);h+=c.toString('latin1')}const n=parseInt(h,10);const d=Buffer.alloc(n);for(let o=0;o<n;){const k=rd(d,o,n-o);if(k<=0)process.exit(3);o+=k}return d.toString('utf8')};const s=g();module.toolcell={stubs:g(),kdir:process.argv[1]||''};const f='[toolcell-runner]';require('vm').runInThisContext(require('module').wrap(s),{filename:f})(exports,require,module,f,'')}"#;

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
            Language::Python => toolcell_stubs::python::stub_module_with(tools, unavailable),
            Language::R => toolcell_stubs::r::stub_module(tools, unavailable),
            Language::JavaScript => toolcell_stubs::js::stub_module(tools, unavailable),
        }
    }

    /// The interpreter's arguments for a local kernel. Python: a bootstrap
    /// that reads the runner from fd 4, then the runner's path (for
    /// messages and `__file__`). R and JavaScript: the in-band bootstrap,
    /// then the kernel directory (where figures go).
    pub fn launch_args(self, runner_path: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = self.flags().iter().map(OsString::from).collect();
        match self {
            Language::Python => args.push(runner_path.as_os_str().to_owned()),
            Language::R | Language::JavaScript => {
                if let Some(dir) = runner_path.parent() {
                    args.push(dir.as_os_str().to_owned());
                }
            }
        }
        args
    }

    /// The interpreter's flags and bootstrap, before any path.
    pub(crate) fn flags(self) -> Vec<&'static str> {
        match self {
            Language::Python => vec!["-u", "-c", BOOTSTRAP],
            Language::R => vec!["--no-echo", "--no-restore", "-e", BOOTSTRAP_R],
            Language::JavaScript => vec!["-e", BOOTSTRAP_JS],
        }
    }

    /// Whether the runner speaks the in-band protocol locally too (requests
    /// on stdin, the runner and stub module sent there first, tool calls as
    /// frames): R and JavaScript always; Python locally uses fd 3 and the
    /// tool socket.
    pub fn inband(self) -> bool {
        self != Language::Python
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

/// The bootstrap the interpreter runs (`python -u -c BOOTSTRAP <runner
/// path> [code]`): it reads the runner from fd 4 — the file the host
/// created with `O_EXCL | O_NOFOLLOW` in the verified kernel directory —
/// closes it, and runs it as `__main__` with `__file__` set to the path,
/// so nothing is re-resolved by name. With a second argument, fd 5 holds
/// the runner already compiled by this interpreter (`crate::interpreter`'s
/// code cache: magic number, then `marshal` data); it runs that instead of
/// compiling, unless it does not match or load.
pub const BOOTSTRAP: &str = "import sys\nc=None\nif len(sys.argv)>2:\n try:\n  import marshal\n  f=open(5,'rb')\n  d=f.read()\n  f.close()\n  if d[:4]==sys.modules['_frozen_importlib_external'].MAGIC_NUMBER:c=marshal.loads(d[4:])\n  if type(c) is not type((lambda:0).__code__):c=None\n except Exception:c=None\nf=open(4,'rb')\ns=f.read()\nf.close()\np=sys.argv[1]\nsys.argv=[p]\nexec(c or compile(s,p,'exec'),{'__name__':'__main__','__file__':p,'__builtins__':__builtins__})\n";

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
    fn launch_ends_with_the_runner_path_or_the_kernel_dir() {
        let args = Language::Python.launch_args(Path::new("/k/runner.py"));
        assert_eq!(args.last().map(|a| a.to_str()), Some(Some("/k/runner.py")));
        for l in [Language::R, Language::JavaScript] {
            let args = l.launch_args(Path::new("/k/runner"));
            assert_eq!(args.last().map(|a| a.to_str()), Some(Some("/k")));
        }
    }

    #[test]
    fn the_r_bootstrap_survives_the_r_front_end() {
        // `R` passes `-e` through `echo` (backslashes) and `~+~` (spaces).
        assert!(!BOOTSTRAP_R.contains('\\') && !BOOTSTRAP_R.contains('~'));
    }
}
