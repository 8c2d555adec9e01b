//! Persistent Python kernels (crate docs being written).

pub mod capture;
pub mod config;
pub mod env;
pub mod interpreter;
pub mod kernel;
pub mod registry;
pub mod result;
mod shim;

pub use kernel::{CellOptions, CellOutcome, Ending, Kernel, KernelSpec, LiveSink, SpawnError, StreamKind, TimeoutPolicy};
pub use registry::{ExecuteRequest, Guard, KernelMode, Registry, RegistryError, RegistryOptions, SessionInfo, SessionKey};
pub use result::{Display, ExecuteResult, KernelInfo, Status, Usage};
