//! systemd's notification protocol: a daemon started with `NOTIFY_SOCKET`
//! says `READY=1` once it listens, pings `WATCHDOG=1` at half of
//! `WATCHDOG_USEC`, and says `STOPPING=1` when it drains; an abstract
//! socket name (`@name`) works as a path does.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// The datagrams received, each as text, until `until` is among them.
fn read_until(socket: &UnixDatagram, until: &str) -> Vec<String> {
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no {until:?} after {got:?}: {e}"));
        let text = String::from_utf8(buf[..n].to_vec()).unwrap();
        let done = text.lines().any(|l| l == until);
        got.push(text);
        if done {
            return got;
        }
    }
}

fn start_notified(w: &World, socket_name: &str) -> Daemon {
    let mut c = Daemon::command(w, &[]);
    c.env("NOTIFY_SOCKET", socket_name)
        .env("WATCHDOG_USEC", "200000");
    Daemon::spawn(c).unwrap_or_else(|log| panic!("daemon did not start:\n{log}"))
}

/// The whole life of a notified daemon, in the order systemd needs it.
fn ready_pings_and_stops(socket: &UnixDatagram, mut d: Daemon) {
    let ready = read_until(socket, "READY=1");
    // Ready means listening: a request is answered now. (The watchdog
    // may be pinged before.)
    let (last, before) = ready.split_last().unwrap();
    assert!(before.iter().all(|m| m == "WATCHDOG=1"), "{ready:?}");
    assert!(last.contains("STATUS=listening on unix:"), "{ready:?}");
    assert_eq!(d.get("/v1/version").status, 200);
    // At half of 200 ms: two pings come long before the hang protection.
    for _ in 0..2 {
        let ping = read_until(socket, "WATCHDOG=1");
        assert!(ping.iter().all(|m| m == "WATCHDOG=1"), "{ping:?}");
    }
    // The datagrams wait in the socket's buffer after the daemon exits.
    assert!(d.stop().success());
    let rest = read_until(socket, "STOPPING=1");
    assert!(rest.iter().all(|m| !m.contains("READY=1")), "{rest:?}");
}

#[test]
fn a_notified_daemon_says_ready_pings_its_watchdog_and_says_stopping() {
    let w = World::new();
    let path = w.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let d = start_notified(&w, path.to_str().unwrap());
    ready_pings_and_stops(&socket, d);
}

#[test]
fn an_abstract_notify_socket_is_reached_by_its_name() {
    use std::os::linux::net::SocketAddrExt;
    let w = World::new();
    let name = format!("skill-runner-test-notify-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = UnixDatagram::bind_addr(&addr).unwrap();
    let d = start_notified(&w, &format!("@{name}"));
    ready_pings_and_stops(&socket, d);
}

/// Without `NOTIFY_SOCKET` nothing is sent and nothing is said of it;
/// with one nobody listens on, the daemon serves anyway and says once
/// that the service manager is not told.
#[test]
fn a_notify_socket_nobody_reads_does_not_stop_the_daemon() {
    let w = World::new();
    let mut c = Daemon::command(&w, &[]);
    c.env("NOTIFY_SOCKET", w.path().join("nobody.sock"))
        .env("WATCHDOG_USEC", "100000");
    let d = Daemon::spawn(c).unwrap();
    assert_eq!(d.get("/v1/version").status, 200);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.get("/v1/version").status, 200);
    let log = d.log();
    assert_eq!(
        log.matches("the service manager is not told").count(),
        1,
        "{log}"
    );
}
