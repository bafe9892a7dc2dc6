//! Review: the resource-level, secret-safe comparison of two renders ([`diff`]) and its
//! text, Markdown and JSON forms ([`report`]).

pub mod diff;
pub mod report;
