//! The sandbox's end of the network (Linux): a forwarder listening on
//! [`super::FORWARDER_ADDR`] inside the sandbox's own network namespace,
//! which has only loopback, carrying each connection unchanged over the
//! Unix socket bound at [`super::SANDBOX_SOCKET`] to the runner's proxy.
//!
//! The exec shim ([`crate::sandbox::shim`]) starts it before it executes the
//! command: it binds the listener first (so the port accepts connections
//! by the time the command runs), then forks a detached forwarder
//! ([`crate::supervise::sys::fork_detached`]), which is reparented to the sandbox's
//! pid 1 (so it is no child of the command, whose `wait` it must not
//! disturb) and dies with the sandbox. It holds only the listener: not the
//! shim's report pipe, its binary or the command's output.
//!
//! The forwarder decides nothing. The command can reach the runner's
//! socket itself, or kill the forwarder; either way every request is
//! judged by the runner's proxy, with this execution's policy.

use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::http;

/// Binds the forwarder's port and starts the forwarder; returns in the
/// shim once the forwarder is detached.
pub fn start() -> io::Result<()> {
    let listener = TcpListener::bind(super::FORWARDER_ADDR)?;
    if crate::supervise::sys::fork_detached(listener.as_raw_fd())? {
        let code = match serve(listener, PathBuf::from(super::SANDBOX_SOCKET)) {
            Ok(()) => 0,
            Err(_) => 1,
        };
        std::process::exit(code);
    }
    Ok(())
}

/// Accepts forever, relaying each connection to `socket`.
fn serve(listener: TcpListener, socket: PathBuf) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        loop {
            match listener.accept().await {
                Ok((tcp, _)) => {
                    tokio::spawn(relay(tcp, socket.clone()));
                }
                // Out of descriptors: wait rather than spin.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    })
}

async fn relay(mut tcp: tokio::net::TcpStream, socket: PathBuf) {
    use tokio::io::AsyncWriteExt;
    let _ = tcp.set_nodelay(true);
    match tokio::net::UnixStream::connect(&socket).await {
        Ok(mut unix) => {
            let _ =
                tokio::io::copy_bidirectional_with_sizes(&mut tcp, &mut unix, 64 * 1024, 64 * 1024)
                    .await;
        }
        Err(e) => {
            let _ = tcp
                .write_all(&http::answer(
                    502,
                    "proxy_unavailable",
                    &format!(
                        "the runner's proxy at {} cannot be reached: {e}",
                        show(&socket)
                    ),
                ))
                .await;
        }
    }
}

fn show(p: &Path) -> String {
    p.display().to_string()
}
