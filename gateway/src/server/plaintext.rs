//! A TLS listener that answers plaintext clients in words they understand.
//!
//! A client configured with `http://` for a gateway that serves TLS would otherwise get a TLS
//! alert it cannot read and report a bare "connection closed". Every connection's first byte
//! is peeked: a TLS handshake record goes on to the gRPC server (and its TLS acceptor); anything
//! else is served by a small HTTP server whose every answer is UNAVAILABLE naming the fix,
//! which a gRPC client shows as it is.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The first byte of a TLS record that carries a handshake (RFC 8446, section 5.1).
const TLS_HANDSHAKE: u8 = 0x16;

/// A client that connects and sends nothing is not waited on forever.
const FIRST_BYTE_WAIT: Duration = Duration::from_secs(10);

/// Connections accepted and not yet handed on, per kind; past this, accepting waits.
const QUEUED_CONNECTIONS: usize = 256;

/// What a plaintext client is told.
pub fn refusal_message(addr: SocketAddr) -> String {
    format!(
        "this gateway serves TLS only: the client connected without TLS; \
         use https://{addr} (and the gateway's CA certificate)"
    )
}

/// Accepts on `listener` and returns the connections that start a TLS handshake, for the gRPC
/// server; the others are answered with [`refusal_message`] and closed.
pub fn tls_only(listener: TcpListener) -> ReceiverStream<io::Result<TcpStream>> {
    let (tls_tx, tls_rx) = mpsc::channel(QUEUED_CONNECTIONS);
    let (plain_tx, plain_rx) = mpsc::channel(QUEUED_CONNECTIONS);
    let addr = listener.local_addr().ok();
    tokio::spawn(accept(listener, tls_tx, plain_tx));
    if let Some(addr) = addr {
        tokio::spawn(refuse(plain_rx, addr));
    }
    ReceiverStream::new(tls_rx)
}

async fn accept(
    listener: TcpListener,
    tls: mpsc::Sender<io::Result<TcpStream>>,
    plain: mpsc::Sender<(TcpStream, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors and the like: the gRPC server decides, as it would
                // with its own listener; a closed server ends this loop.
                if tls.send(Err(err)).await.is_err() {
                    return;
                }
                continue;
            }
        };
        if tls.is_closed() {
            return;
        }
        // Nagle would hold back small gRPC frames (heartbeats, acknowledgements).
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "setting TCP_NODELAY failed");
        }
        let tls = tls.clone();
        let plain = plain.clone();
        // Peeked on its own task: one silent client holds up no other.
        tokio::spawn(async move {
            let mut first = [0u8; 1];
            match tokio::time::timeout(FIRST_BYTE_WAIT, stream.peek(&mut first)).await {
                Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {
                    let _ = tls.send(Ok(stream)).await;
                }
                Ok(Ok(1)) => {
                    tracing::debug!(%peer, "a client connected without TLS; it is told to use TLS");
                    let _ = plain.send((stream, peer)).await;
                }
                // Closed, failed or silent: nothing to answer.
                _ => {}
            }
        });
    }
}

/// Serves the plaintext connections: HTTP/2 (what a gRPC client speaks) and HTTP/1.
async fn refuse(connections: mpsc::Receiver<(TcpStream, SocketAddr)>, addr: SocketAddr) {
    let message = refusal_message(addr);
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let message = message.clone();
        async move { refusal(&request, message) }
    });
    if let Err(err) = axum::serve(Channel(connections, addr), app).await {
        tracing::warn!(error = %err, "the plaintext refusal server ended");
    }
}

fn refusal(request: &axum::extract::Request, message: String) -> http::Response<axum::body::Body> {
    let grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        tonic::Status::unavailable(message).into_http()
    } else {
        let mut response = http::Response::new(axum::body::Body::from(format!("{message}\n")));
        *response.status_mut() = http::StatusCode::BAD_REQUEST;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

/// The plaintext connections as an [`axum::serve::Listener`].
struct Channel(mpsc::Receiver<(TcpStream, SocketAddr)>, SocketAddr);

impl axum::serve::Listener for Channel {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        match self.0.recv().await {
            Some(connection) => connection,
            // The acceptor is gone with the server: nothing will come again.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.1)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    #[tokio::test]
    async fn a_tls_handshake_goes_on_and_plain_http_is_told_to_use_tls() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = tls_only(listener);

        let mut tls_client = TcpStream::connect(addr).await.unwrap();
        tls_client.write_all(&[TLS_HANDSHAKE, 3, 1]).await.unwrap();
        let mut handed_on = incoming.next().await.unwrap().unwrap();
        let mut first = [0u8; 3];
        handed_on.read_exact(&mut first).await.unwrap();
        assert_eq!(
            first,
            [TLS_HANDSHAKE, 3, 1],
            "the peeked byte is still there"
        );

        let mut plain = TcpStream::connect(addr).await.unwrap();
        plain
            .write_all(b"GET / HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        plain.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("serves TLS only"), "{answer}");
        assert!(answer.contains(&format!("https://{addr}")), "{answer}");
    }

    #[tokio::test]
    async fn a_grpc_request_gets_unavailable_with_the_message() {
        let request = http::Request::builder()
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = refusal(&request, "use https".into());
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "use https");
    }
}
