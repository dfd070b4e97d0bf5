//! A TCP proxy that delays every chunk by a fixed time in each direction:
//! a simulated network hop between votegraph and Redis.
//!
//! It runs on plain threads, not the async runtime: tokio's timers tick in
//! whole milliseconds and fire late when the runtime is busy, while a
//! thread sleeping until each chunk is due adds only its wake-up, however
//! many commands are in flight.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Listens on a free port and forwards to `upstream`; returns the port.
pub fn start(upstream: String, delay: Duration) -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    thread::Builder::new()
        .name("hop-accept".into())
        .spawn(move || {
            for client in listener.incoming().flatten() {
                if let Ok(server) = TcpStream::connect(&upstream) {
                    let _ = forward(client, server, delay);
                }
            }
        })?;
    Ok(port)
}

/// Starts both directions of one proxied connection.
fn forward(client: TcpStream, server: TcpStream, delay: Duration) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    pump(client.try_clone()?, server.try_clone()?, delay)?;
    pump(server, client, delay)
}

/// Reads as data arrives and writes each chunk `delay` after it was read,
/// in order, so the hop adds latency without limiting throughput.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::Builder::new()
        .name("hop-write".into())
        .spawn(move || {
            for (due, chunk) in rx {
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    thread::Builder::new()
        .name("hop-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0
                    || tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                {
                    break;
                }
            }
        })?;
    Ok(())
}
