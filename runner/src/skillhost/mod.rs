//! The skill host: the skills this host offers by name ([`catalog`]) and
//! the sessions that freeze a selection of them and serve it to an agent
//! through tool routes ([`session`]), and over the Model Context Protocol
//! ([`mcp`], docs/mcp.md); docs/skill-host.md.
//!
//! Invariants of the room:
//! - a session's skills are frozen bindings (id, revision, version, hash)
//!   from the moment it is created; what an agent reads through a session
//!   is read from the store by hash, never from a catalog folder;
//! - catalog folders are read without following symlinks, and what is
//!   read is published exactly as read.

pub mod catalog;
pub mod mcp;
pub mod session;
