//! What the fuzz targets share: how one input becomes a sequence of frames,
//! and the fixed identity of the in-process gateway's sandbox.
//!
//! Inputs of the stream targets are frames, each a varint length and that many
//! bytes (prost's length-delimited form); the last frame takes whatever is left
//! when the length overruns the input. Framing is the harness's, the bytes of
//! each frame are the fuzzer's: mutations inside a frame do not shift the
//! frames after it.

use prost::encoding::{decode_varint, encode_varint};

pub mod seeds;

/// Sandbox of the gateway target: its id, name and supervisor credential.
pub const SANDBOX_ID: &str = "sb-00000000-0000-7000-8000-00000000f022";
pub const SANDBOX_NAME: &str = "fuzz";
pub const CREDENTIAL: &str = "fuzz-supervisor-credential";

/// Splits an input into its frames.
pub fn frames(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let Ok(len) = decode_varint(&mut data) else {
            out.push(data);
            break;
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX).min(data.len());
        let (frame, rest) = data.split_at(len);
        out.push(frame);
        data = rest;
    }
    out
}

/// Joins frames into one input; the inverse of [`frames`], for seeds.
pub fn join(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        encode_varint(frame.len() as u64, &mut out);
        out.extend_from_slice(frame);
    }
    out
}

/// Frames as a gRPC request body: each behind its 5-byte prefix (not compressed, big-endian
/// length).
pub fn grpc_body(frames: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        out.push(0);
        out.extend_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(frame);
    }
    out
}
