//! Limits that more than one module enforces, in one place: the server
//! configures its services with them and the session checks what it is
//! about to send against the same numbers. Limits that one module alone
//! keeps stay next to their check.

/// Largest gRPC message accepted: a 256 KiB policy plus headroom. The
/// server's decoding limit, and the largest bootstrap a session sends.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Largest peer hint accepted; a hint holds ids, never configuration.
pub const MAX_PEER_MESSAGE_BYTES: usize = 16 * 1024;
