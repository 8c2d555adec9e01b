//! The operating-system plumbing every toolcell layer stands on: how a
//! kernel's processes are found and killed, the per-kernel cgroup that
//! nothing inside can leave, which process descends from which kernel, and
//! directories another local user cannot swap.
//!
//! It sits at the bottom of the flow: the tool-call server, the tools, the
//! kernel and the binary all use it, and it uses none of them. Nothing here
//! knows about cells, tools or JSON; everything is Linux.
//!
//! - [`process`]: a kernel's process tree ([`process::Tree`]) found by
//!   process group, parent links, an environment marker, its cgroup and its
//!   lineage, and killed as a whole; the host's child-subreaper mode and
//!   [`process::forbid_inspection`] (the host made non-dumpable).
//! - [`cgroup`]: one cgroup v2 per kernel under the host's own, where the
//!   machine allows it ([`cgroup::HostCgroup::get`]).
//! - [`lineage`]: the processes forked from a kernel, recorded at their fork
//!   from the kernel's process-event connector (root hosts), so one that
//!   left every other trace is still found.
//! - [`pidfd`]: a handle on a process that a recycled pid cannot fool.
//! - [`procfs`]: what `/proc/<pid>/stat` says (alive, parent, start time),
//!   read in one place.
//! - [`sandbox`]: a process tree in namespaces of its own, with a
//!   read-only view of the machine, a seccomp filter and no capabilities;
//!   joining it later; what it may read and write.
//! - [`private_dir`]: directories opened from `/` one component at a time
//!   with `O_NOFOLLOW` descriptors, and files made `O_EXCL` inside them.
//!
//! ```
//! use toolcell_sys::{lineage, process};
//!
//! let me = std::process::id();
//! assert!(process::alive(me));
//! let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
//! assert!(lineage::descends_from(child.id(), me));
//! let tree = process::Tree {
//!     root: child.id(),
//!     pgid: None,
//!     marker: None,
//!     cgroup: None,
//!     started: process::start_time(child.id()),
//!     lineage: None,
//!     namespace: None,
//! };
//! tree.signal(nix::sys::signal::Signal::SIGKILL);
//! child.wait().unwrap();
//! ```

pub mod cgroup;
pub mod lineage;
pub mod pidfd;
pub mod private_dir;
pub mod process;
pub mod procfs;
pub mod sandbox;
