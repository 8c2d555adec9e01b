//! The figures a cell returns (`display`) are checked by the host (issue 14):
//! a cell that replaces the runner's figure saver cannot make the host read,
//! return, journal or export a file outside the kernel's artifacts directory
//! (the host's `/proc/<pid>/environ`, a symbolic link, a FIFO, a huge file)
//! or a type outside the image allow-list; a real PNG written where the
//! runner saves figures is kept, journaled and exported; an SVG holding a
//! host secret comes back redacted, on disk, in the journal and the export.
//!
//! Real kernels, a real journal, and (for the host-secret tests) a host
//! process of its own whose environment holds the secret from the start.
#![cfg(feature = "journal")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{Fixture, assert_success, show};
use toolcell_host::journal::{self, CellRecord, Format, HistoryQuery, Journal};
use toolcell_kernel::ExecuteResult;

const FLUSH: Duration = Duration::from_secs(20);
const SECRET_VAR: &str = "TOOLCELL_FIG_SECRET_TOKEN";
const HOST_SECRET: &str = "fig-Qw8Er4Ty7Ui2Op5As1Df9Gh3Jk6Lz0";

/// Finds the runner's globals and lets the next cell's `display` list be
/// anything: `claim(entries)` replaces the figure saver for one cell.
const FORGE: &str = r#"
import gc, os
G = next(o for o in gc.get_objects()
         if isinstance(o, dict) and '_save_figures' in o and '_MARK' in o)
ORIG = G['_save_figures']
ART = G['_ensure_artifacts']()
def claim(entries):
    def saver(count):
        G['_save_figures'] = ORIG
        return entries
    G['_save_figures'] = saver
print('artifacts', ART)
"#;

/// A registry with a journal, in a temporary directory.
struct Journaled {
    f: Fixture,
    journal: Journal,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Journaled {
    fn new() -> Self {
        Self::made(false)
    }

    /// Without a sandbox: for the tests of the layers under it (a sandboxed
    /// cell cannot see the host's process to read its environment).
    fn unsandboxed() -> Self {
        Self::made(true)
    }

    fn made(unsandboxed: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let journal = Journal::open(&path).unwrap();
        let j = journal.clone();
        let f = Fixture::with(move |o| {
            o.journal = Some(j);
            if unsandboxed {
                o.sandbox = toolcell_kernel::sandbox::Policy::off();
            }
        });
        Self {
            f,
            journal,
            path,
            _dir: dir,
        }
    }

    fn rows(&self) -> Vec<CellRecord> {
        assert!(self.journal.flush(FLUSH), "journal did not flush");
        Journal::history(&self.path, &HistoryQuery::session("default")).unwrap()
    }

    /// The database file and its WAL, as text.
    fn files(&self) -> String {
        assert!(self.journal.flush(FLUSH), "journal did not flush");
        let mut all = Vec::new();
        for suffix in ["", "-wal"] {
            let mut p = self.path.as_os_str().to_owned();
            p.push(suffix);
            all.extend(std::fs::read(PathBuf::from(p)).unwrap_or_default());
        }
        String::from_utf8_lossy(&all).into_owned()
    }

    /// Runs `code` with a 60 s guard (a hung host fails, not hangs, the test).
    async fn run(&self, code: &str) -> ExecuteResult {
        tokio::time::timeout(Duration::from_secs(60), self.f.run(code))
            .await
            .expect("the cell did not come back within 60 s")
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn json(r: &ExecuteResult) -> String {
    serde_json::to_string(r).unwrap()
}

const FORGED: &str = "figures::forged_display_entries_are_dropped_with_a_warning_and_nothing_is_read_from_their_paths";

#[test]
fn forged_display_entries_are_dropped_with_a_warning_and_nothing_is_read_from_their_paths() {
    if !common::is_child(FORGED) {
        common::run_child(FORGED, &[(SECRET_VAR, HOST_SECRET)]);
        return;
    }
    rt().block_on(async {
        let j = Journaled::unsandboxed();
        let out = j.f.ok(FORGE).await;
        let art = PathBuf::from(out.trim().strip_prefix("artifacts ").unwrap());
        let host = std::process::id();
        let environ = format!("/proc/{host}/environ");
        assert!(
            std::fs::read_to_string(&environ).unwrap().contains(HOST_SECRET),
            "the test needs the secret in the host's environment"
        );

        // The adversarial review's entry: a secret in the type, the host's
        // environment as the path.
        let r = j
            .run(&format!(
                "claim([{{'mime': 'text/plain;' + open('{environ}', 'rb').read().decode(errors='replace'), 'path': '{environ}'}}])\nprint('claimed')"
            ))
            .await;
        assert_success(&r);
        assert!(r.display.is_empty(), "{}", show(&r));
        let w = r.warning.clone().unwrap_or_default();
        assert!(
            w.contains("display entry 1 dropped: its type is not one of image/png, image/svg+xml, image/jpeg."),
            "{w}"
        );
        assert!(!json(&r).contains(HOST_SECRET), "{}", show(&r));
        // The cell did read the file: `files.read` says so, as evidence.
        // Nothing else in the result names it.
        assert_eq!(
            r.files.as_ref().map(|f| f.read.clone()),
            Some(vec![environ.clone()]),
            "{}",
            show(&r)
        );
        let mut rest = r.clone();
        rest.files = None;
        assert!(!json(&rest).contains("/environ"), "{}", show(&r));

        // An allowed type does not make another path acceptable.
        let r = j
            .run(&format!(
                "claim([{{'mime': 'image/png', 'path': '{environ}'}},\n\
                 {{'mime': 'image/png', 'path': ART + '/../owner.pid'}},\n\
                 {{'mime': 'image/png', 'path': 'cell-1-fig-1.png'}}])"
            ))
            .await;
        assert!(r.display.is_empty(), "{}", show(&r));
        let w = r.warning.clone().unwrap_or_default();
        for n in 1..=3 {
            assert!(
                w.contains(&format!("display entry {n} dropped: its path is not a file directly in this kernel's artifacts directory.")),
                "{w}"
            );
        }

        // A symbolic link in the artifacts directory pointing out.
        let link = art.join("link.png");
        let r = j
            .run(&format!(
                "os.symlink('{environ}', ART + '/link.png')\n\
                 claim([{{'mime': 'image/png', 'path': ART + '/link.png'}}])"
            ))
            .await;
        assert!(link.is_symlink());
        assert!(r.display.is_empty(), "{}", show(&r));
        assert!(
            r.warning
                .as_deref()
                .unwrap_or_default()
                .contains("display entry 1 dropped: its file is a symbolic link."),
            "{}",
            show(&r)
        );

        // A FIFO (opening it must not block the host), and a file past 16 MiB.
        let r = j
            .run(
                "os.mkfifo(ART + '/pipe.png')\n\
                 with open(ART + '/big.png', 'wb') as f:\n    f.truncate(16 * 1024 * 1024 + 1)\n\
                 claim([{'mime': 'image/png', 'path': ART + '/pipe.png'},\n\
                        {'mime': 'image/jpeg', 'path': ART + '/big.png'}])",
            )
            .await;
        assert!(r.display.is_empty(), "{}", show(&r));
        let w = r.warning.clone().unwrap_or_default();
        assert!(
            w.contains("display entry 1 dropped: its file is not a regular file."),
            "{w}"
        );
        assert!(
            w.contains("display entry 2 dropped: its file is 16777217 bytes, more than the 16777216 accepted."),
            "{w}"
        );

        // The artifacts directory itself replaced by a link to a directory
        // holding a "figure".
        let r = j
            .run(
                "import shutil, tempfile\n\
                 elsewhere = tempfile.mkdtemp()\n\
                 open(elsewhere + '/x.png', 'wb').write(b'\\x89PNG elsewhere')\n\
                 shutil.rmtree(ART)\n\
                 os.symlink(elsewhere, ART)\n\
                 claim([{'mime': 'image/png', 'path': ART + '/x.png'}])",
            )
            .await;
        assert!(r.display.is_empty(), "{}", show(&r));
        assert!(
            r.warning
                .as_deref()
                .unwrap_or_default()
                .contains("display entry 1 dropped: the kernel's artifacts directory is not a plain directory."),
            "{}",
            show(&r)
        );

        // Nothing of the host's environment reached the journal or an export.
        let rows = j.rows();
        assert_eq!(rows.len(), 6);
        assert!(rows.iter().all(|r| r.display.is_empty()), "{rows:#?}");
        let db = j.files();
        assert!(!db.contains(HOST_SECRET), "the journal holds the host secret");
        assert!(!db.contains("PATH="), "the journal holds the host's environment");
        for format in [Format::Ipynb, Format::Py, Format::Md] {
            let text = journal::export(&rows, format);
            assert!(!text.contains(HOST_SECRET), "{format:?}: {text}");
            assert!(!text.contains("display_data"), "{format:?}: {text}");
        }
    });
}

/// A fake `matplotlib.pyplot` whose one figure writes a valid 1×1 PNG, so
/// the runner's own saver (`cell-<n>-fig-<k>.png` in the artifacts
/// directory) runs without matplotlib installed.
const FIGURE_CELL: &str = r#"
import sys, types, zlib, struct
def _chunk(kind, data):
    body = kind + data
    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body) & 0xffffffff)
PNG = (b'\x89PNG\r\n\x1a\n' + _chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + _chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + _chunk(b'IEND', b''))
class _Figure:
    def savefig(self, path, format=None):
        with open(path, 'wb') as f:
            f.write(PNG)
_figs = {1: _Figure()}
plt = types.ModuleType('matplotlib.pyplot')
plt.get_fignums = lambda: list(_figs)
plt.figure = lambda num=None: _figs[num]
plt.close = lambda num=None: _figs.pop(num, None)
sys.modules['matplotlib.pyplot'] = plt
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_png_the_runners_saver_wrote_is_kept_journaled_and_exported() {
    let j = Journaled::new();
    let r = j.run(FIGURE_CELL).await;
    assert_success(&r);
    assert_eq!(r.display.len(), 1, "{}", show(&r));
    assert_eq!(r.warning, None);
    let d = &r.display[0];
    assert_eq!(d.mime, "image/png");
    let kernel_dir = j.f.kernels_root().join(&r.kernel.id);
    assert_eq!(
        Path::new(&d.path),
        kernel_dir.join("artifacts/cell-1-fig-1.png")
    );
    let png = std::fs::read(&d.path).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));

    // The journal kept the bytes the host checked; the export embeds them
    // even after the kernel (and its directory) are gone.
    j.f.reg.shutdown_all().await;
    assert!(!Path::new(&d.path).exists());
    let rows = j.rows();
    assert_eq!(rows[0].display.len(), 1);
    assert_eq!(rows[0].display[0].data.as_deref(), Some(png.as_slice()));
    let nb: serde_json::Value =
        serde_json::from_str(&journal::export(&rows, Format::Ipynb)).unwrap();
    let outputs = nb["cells"][1]["outputs"].as_array().unwrap();
    let fig = outputs
        .iter()
        .find(|o| o["output_type"] == "display_data")
        .unwrap_or_else(|| panic!("{outputs:#?}"));
    use base64::Engine as _;
    let embedded = base64::engine::general_purpose::STANDARD
        .decode(fig["data"]["image/png"].as_str().unwrap())
        .unwrap();
    assert_eq!(embedded, png);
}

const SVG: &str = "figures::an_svg_holding_a_host_secret_comes_back_redacted";

#[test]
fn an_svg_holding_a_host_secret_comes_back_redacted() {
    if !common::is_child(SVG) {
        common::run_child(SVG, &[(SECRET_VAR, HOST_SECRET)]);
        return;
    }
    rt().block_on(async {
        let j = Journaled::unsandboxed();
        j.f.ok(FORGE).await;
        let r = j
            .run(&format!(
                "raw = open(f'/proc/{{os.getppid()}}/environ', 'rb').read().split(b'\\0')\n\
                 secret = next(kv for kv in raw if kv.startswith(b'{SECRET_VAR}=')).split(b'=', 1)[1].decode()\n\
                 svg = '<svg xmlns=\"http://www.w3.org/2000/svg\"><text>' + secret + '</text></svg>'\n\
                 open(ART + '/cell-2-fig-1.svg', 'w').write(svg)\n\
                 claim([{{'mime': 'image/svg+xml', 'path': ART + '/cell-2-fig-1.svg'}}])"
            ))
            .await;
        assert_success(&r);
        assert_eq!(r.display.len(), 1, "{}", show(&r));
        assert_eq!(r.warning, None, "{}", show(&r));
        let d = &r.display[0];
        assert_eq!(d.mime, "image/svg+xml");
        // The file at the path was rewritten, redacted.
        let on_disk = std::fs::read_to_string(&d.path).unwrap();
        assert!(!on_disk.contains(HOST_SECRET), "{on_disk}");
        assert!(on_disk.contains("<text>«redacted:"), "{on_disk}");
        assert!(on_disk.ends_with("</text></svg>"), "{on_disk}");
        let meta = std::fs::symlink_metadata(&d.path).unwrap();
        assert!(meta.file_type().is_file());

        let rows = j.rows();
        let kept = rows[1].display[0].data.as_deref().unwrap();
        assert_eq!(kept, on_disk.as_bytes());
        assert!(!j.files().contains(HOST_SECRET), "the journal holds the secret");
        let nb = journal::export(&rows, Format::Ipynb);
        assert!(!nb.contains(HOST_SECRET));
        let nb: serde_json::Value = serde_json::from_str(&nb).unwrap();
        let fig = nb["cells"][2]["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["output_type"] == "display_data")
            .cloned()
            .unwrap_or_else(|| panic!("{nb:#}"));
        assert_eq!(fig["data"]["image/svg+xml"], on_disk.as_str());
    });
}
