//! The accept loop: HTTP/1.1 connections served by hyper with a header-read timeout (slow
//! clients are cut off), a write timeout on the socket (a client that stops reading is
//! cut off, which drops its body and so cancels its request), WebSocket upgrades, and a
//! graceful stop: on shutdown the listener closes, idle connections close, and responses
//! in flight may finish.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_io_timeout::TimeoutStream;

use super::config::Timeouts;
use super::tracker::Tracker;

/// Serves `app` on `listener` until `shutdown` turns true, then stops accepting and asks
/// every connection to finish. Returns the tracker of the connections still open.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: Timeouts,
    mut shutdown: watch::Receiver<bool>,
) -> Tracker {
    let connections = Tracker::default();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read)
        .keep_alive(true);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = until_true(&mut shutdown) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: back off a little, keep serving.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let mut io = TimeoutStream::new(tcp);
        io.set_write_timeout(Some(timeouts.write));
        let io = TokioIo::new(Box::pin(io));
        let service = TowerToHyperService::new(app.clone());
        let conn = http.serve_connection(io, service).with_upgrades();
        let tracked = connections.track();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = until_true(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(tracked);
        });
    }
    drop(listener);
    connections
}

/// Resolves once the flag is true (or its sender is gone).
pub async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
