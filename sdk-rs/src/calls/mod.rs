//! The API calls, one file per area of the contract. Each is a thin
//! `impl Client` block: build the wire request, pick the retry rule, convert
//! the answer into a view type.

mod config;
mod logs;
mod operation;
pub(crate) mod provider;
mod sandbox;
mod session;
mod token;
