//! The sandbox, from outside: real processes in real namespaces.

mod sandbox;
