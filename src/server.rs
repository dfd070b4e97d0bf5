//! The HTTP/1.1 accept loop over hyper, with the bounds poem's `Server`
//! lacks (docs/security.md, "HTTP"): connections in all and per address (an
//! upgraded WebSocket keeps its place), the header timeout and size.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use poem::endpoint::BoxEndpoint;
use poem::web::{LocalAddr, RemoteAddr};
use poem::{Addr, Endpoint};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::client_addr::TrustedProxies;
use crate::error::AppError;

/// The bounds of the HTTP server.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    pub max_connections: usize,
    pub max_per_client: usize,
    pub header_timeout: Duration,
    /// Peers not counted per address.
    pub trusted: TrustedProxies,
}

const MAX_HEADER_BYTES: usize = 64 * 1024;

/// A response body as hyper sends it.
type Body = http_body_util::combinators::BoxBody<bytes::Bytes, std::io::Error>;

/// Open connections (or WebSockets) per client address; none at zero.
#[derive(Default, Clone)]
pub(crate) struct PerClient(Arc<Mutex<HashMap<IpAddr, usize>>>);

impl PerClient {
    /// A slot for one more from `ip`, or None when it holds `max` already.
    pub(crate) fn admit(&self, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut counts = self.0.lock();
        let count = counts.entry(ip).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            counts: self.clone(),
            ip,
        })
    }

    /// Open over every address.
    pub(crate) fn total(&self) -> usize {
        self.0.lock().values().sum()
    }
}

/// One connection's place in its address' count, given back on drop.
pub(crate) struct ClientSlot {
    counts: PerClient,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock();
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// A connection's socket, holding its place under the connection caps for
/// as long as it lives (an upgraded WebSocket keeps it too).
struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    _slot: Option<ClientSlot>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Serves `endpoint` on `listener` until `stop` completes, then lets the
/// connections finish their requests for up to `grace`.
pub async fn serve(
    listener: TcpListener,
    endpoint: BoxEndpoint<'static>,
    limits: ServerLimits,
    stop: impl std::future::Future<Output = ()> + Send,
    grace: Duration,
) -> std::io::Result<()> {
    let endpoint = Arc::new(endpoint);
    let local = listener.local_addr()?;
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let per_client = PerClient::default();
    let (stopping, stopped) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, AppError::Overloaded));
            continue;
        };
        // Trusted proxies are not counted per address.
        let slot = (!limits.trusted.contains(peer.ip()))
            .then(|| per_client.admit(peer.ip(), limits.max_per_client.max(1)));
        if let Some(None) = slot {
            let error = AppError::TooManyConnections {
                websocket: false,
                retry_after_secs: 1,
            };
            tokio::spawn(refuse(stream, error));
            continue;
        }
        let io = Counted {
            stream,
            _permit: permit,
            _slot: slot.flatten(),
        };
        tokio::spawn(serve_connection(
            io,
            local,
            peer,
            endpoint.clone(),
            limits.header_timeout,
            stopped.clone(),
        ));
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection holds a permit until it is done.
    let all = limits.max_connections.max(1) as u32;
    if tokio::time::timeout(grace, permits.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period");
    }
    Ok(())
}

/// A `431` JSON error for a head over [`MAX_HEADER_BYTES`] (its target and
/// its headers' names and values: what a client can make the server keep),
/// closing the connection: hyper's buffer limit only stops heads several
/// times larger.
fn oversized_head<B>(req: &hyper::Request<B>) -> Option<hyper::Response<Body>> {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    let bytes = req.headers().iter().fold(target, |n, (name, value)| {
        n + name.as_str().len() + value.len() + 4
    });
    if bytes <= MAX_HEADER_BYTES {
        return None;
    }
    let error = AppError::HeadersTooLarge {
        max_bytes: MAX_HEADER_BYTES,
    };
    tracing::debug!(bytes, "request head over the limit");
    let response = poem::Response::builder()
        .status(error.http_status())
        .content_type("application/json")
        .header(poem::http::header::CONNECTION, "close")
        .body(error.into_json_body());
    Some(response.into())
}

/// Answers a connection it will not serve with the routes' JSON error.
async fn refuse(mut stream: TcpStream, error: AppError) {
    let status = error.http_status();
    tracing::debug!(
        status = status.as_u16(),
        "connection refused: at a connection limit"
    );
    let retry = error.retry_after().unwrap_or(1);
    let body = error.into_json_body();
    let response = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\nretry-after: {retry}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(response.as_bytes()),
    )
    .await;
}

async fn serve_connection(
    io: Counted,
    local: SocketAddr,
    peer: SocketAddr,
    endpoint: Arc<BoxEndpoint<'static>>,
    header_timeout: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let endpoint = endpoint.clone();
        async move {
            if let Some(refused) = oversized_head(&req) {
                return Ok::<_, std::convert::Infallible>(refused);
            }
            let request = poem::Request::from((
                req,
                LocalAddr(Addr::SocketAddr(local)),
                RemoteAddr(Addr::SocketAddr(peer)),
                poem::http::uri::Scheme::HTTP,
            ));
            let response: hyper::Response<Body> = endpoint.get_response(request).await.into();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    let connection = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        result = &mut connection => {
            if let Err(e) = result {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            return;
        }
        _ = stopping.wait_for(|s| *s) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_given_back_and_empty_entries_removed() {
        let counts = PerClient::default();
        let ip: IpAddr = [127, 0, 0, 1].into();
        let a = counts.admit(ip, 2);
        let b = counts.admit(ip, 2);
        assert!(a.is_some() && b.is_some());
        assert!(counts.admit(ip, 2).is_none(), "third connection refused");
        assert!(
            counts.admit([10, 0, 0, 1].into(), 2).is_some(),
            "per address"
        );
        drop(a);
        let c = counts.admit(ip, 2);
        assert!(c.is_some(), "a closed connection frees its slot");
        assert_eq!(counts.total(), 2);
        drop((b, c));
        assert!(counts.0.lock().is_empty(), "no entry left at zero");
    }
}
