//! The codec every generated service and client uses: prost encoding with
//! small initial buffers.
//!
//! tonic's default codec starts each stream with an 8 KiB encode and an
//! 8 KiB decode buffer. A gateway holds one long-lived `ConnectSupervisor`
//! stream per sandbox whose frames are mostly heartbeats of a few bytes, so
//! those buffers were a third of an idle session's memory. Buffers still
//! grow to fit a large snapshot when one is sent, by the message's whole
//! length at once.

use std::marker::PhantomData;

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial encode and decode buffer of a stream.
const INITIAL_BUFFER_BYTES: usize = 256;
/// tonic's default: how much a stream encodes before yielding.
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// Prost encoding with [`INITIAL_BUFFER_BYTES`] buffers.
#[derive(Debug, Clone)]
pub struct SmallBufferCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for SmallBufferCodec<T, U> {
    fn default() -> Self {
        Self {
            _messages: PhantomData,
        }
    }
}

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(INITIAL_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

impl<T, U> Codec for SmallBufferCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ReservingEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ReservingEncoder(ProstCodec::<T, U>::raw_encoder(buffer_settings()))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(buffer_settings())
    }
}

/// Prost encoding that reserves a message's encoded length before writing
/// it: a snapshot larger than the buffer takes one allocation, not a
/// series of doublings, each copying what was written so far.
#[derive(Debug)]
pub struct ReservingEncoder<T>(ProstEncoder<T>);

impl<T: prost::Message> Encoder for ReservingEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.encoded_len());
        self.0.encode(item, dst)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
