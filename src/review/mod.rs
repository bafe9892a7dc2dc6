//! Review: the resource-level, secret-safe comparison of two renders ([`diff`]) and its
//! text, Markdown and JSON forms ([`report`]), and the two sides of `diff --git` read from
//! git with only the clusters whose inputs changed rendered ([`revisions`]).

pub mod diff;
pub mod report;
pub mod revisions;
