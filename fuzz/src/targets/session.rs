//! Session create input and the skill tool inputs
//! (runner/src/skillhost/session/*), called on the skill host as the
//! daemon's session routes call it, against the fixture of
//! `skill_runner_fuzz`.
//!
//! An input is one call, as lines:
//!
//! ```text
//! create\n<POST /v1/sessions body>
//! show\n<session>                      events\n<session>
//! skills\n<session>\n<query string>     load\n<session>\n<name>
//! section\n<session>\n<name>\n<section>\n<query string>
//! resource\n<session>\n<query string>
//! ```
//!
//! `<session>` is an id, or `@files` / `@semantic` for the fixture's two
//! sessions. Query strings are decoded as the routes decode them.
//!
//! Invariants: no panic; a refusal is one line with a 4xx status (a 500
//! on bad input is a bug); a created session reads back as it was answered,
//! with the delivery mode its tools call for; a chunk is a consistent
//! window of its file; every load or read that returns content appended
//! exactly one event that describes it.
use std::sync::OnceLock;

use crate::{one_line, Fixture, SESSION_FILES, SESSION_SEMANTIC};
use skill_runner::package::hash;
use skill_runner::skillhost::session::{
    delivery, Chunk, Delivery, Event, EventKind, ReadRange, ResourceQuery, SessionError,
    SessionHost, SkillsQuery, MAX_READ_LIMIT,
};

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| Fixture::new("session"))
}

/// One input, as the fuzzer and the corpus replay give it.
pub fn run(data: &[u8]) {
    let f = fixture();
    call(f, data);
    f.reset();
}

fn session_id(line: &str) -> &str {
    match line {
        "@files" => SESSION_FILES,
        "@semantic" => SESSION_SEMANTIC,
        other => other,
    }
}

fn call(f: &Fixture, data: &[u8]) {
    let host = &*f.host;
    let (op, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[..0]),
    };
    if op == b"create" {
        return create(host, rest);
    }
    let Ok(rest) = std::str::from_utf8(rest) else {
        return;
    };
    let mut lines = rest.split('\n');
    let mut next = || lines.next().unwrap_or("");
    let id = session_id(next()).to_owned();
    match op {
        b"show" => {
            outcome(host.show(&id));
        }
        b"events" => {
            outcome(host.events(&id));
        }
        b"skills" => {
            let Ok(q) = serde_urlencoded::from_str::<SkillsQuery>(next()) else {
                return;
            };
            if let Some(list) = outcome(host.skills(&id, &q)) {
                assert!(list.result.hits.len() <= q.limit.unwrap_or(usize::MAX));
            }
        }
        b"load" => {
            let name = next();
            if let Some(loaded) = outcome(host.load(&id, name)) {
                assert_eq!(loaded.name, name);
                assert!(loaded.sections.iter().all(|s| s.name != "SKILL.md"));
                let e = one_event(f, &id);
                assert_eq!(e.kind, EventKind::LoadSkill);
                assert_eq!(e.skill, name);
                assert_eq!(e.bytes, loaded.body.len() as u64);
            }
        }
        b"section" => {
            let name = next().to_owned();
            let section = next().to_owned();
            let Ok(range) = serde_urlencoded::from_str::<ReadRange>(next()) else {
                return;
            };
            if let Some(c) = outcome(host.section(&id, &name, &section, range)) {
                assert_eq!(c.skill, name);
                assert_ne!(c.file, "SKILL.md");
                chunk(f, &id, &c, range, EventKind::LoadSection);
            }
        }
        b"resource" => {
            let Ok(q) = serde_urlencoded::from_str::<ResourceQuery>(next()) else {
                return;
            };
            if let Some(c) = outcome(host.resource(&id, &q)) {
                let range = ReadRange {
                    offset: q.offset,
                    limit: q.limit,
                };
                chunk(f, &id, &c, range, EventKind::ReadResource);
            }
        }
        _ => {}
    }
}

/// The answer of a call: a refusal is checked and dropped.
fn outcome<T>(r: Result<T, SessionError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            let msg = e.to_string();
            one_line("session", &msg);
            assert!(
                (400..500).contains(&skill_runner::daemon::app::status(e.kind()).as_u16()),
                "bad input answered {} ({}): {msg}",
                skill_runner::daemon::app::status(e.kind()).as_u16(),
                e.kind()
            );
            None
        }
    }
}

fn create(host: &SessionHost, body: &[u8]) {
    let Some(doc) = outcome(host.create_json(body)) else {
        return;
    };
    for (i, b) in doc.skills.iter().enumerate() {
        assert!(doc.skills[..i].iter().all(|o| o.id != b.id));
        host.store()
            .resolve(b)
            .expect("a frozen binding is in the store");
    }
    assert_eq!(doc.identity, hash::set_identity(&doc.skills));
    let file_tool = doc.enabled_tools.iter().any(|t| delivery::is_file_tool(t));
    assert_eq!(doc.delivery == Delivery::ManagedFilesystem, file_tool);
    assert_eq!(doc.prompt.skills.len(), doc.skills.len());
    assert_eq!(
        host.show(&doc.id).expect("a created session reads back"),
        doc
    );
}

/// Checks a chunk against the range asked and its event.
fn chunk(f: &Fixture, id: &str, c: &Chunk, range: ReadRange, kind: EventKind) {
    let offset = range.offset.unwrap_or(0);
    assert_eq!(c.offset, offset);
    assert!(c.limit >= 1 && c.limit <= MAX_READ_LIMIT);
    assert_eq!(c.returned, c.content.len() as u64);
    assert!(c.returned <= c.limit);
    assert!(c.offset + c.returned <= c.size);
    assert_eq!(c.truncated, c.offset + c.returned < c.size);
    assert_eq!(c.next_offset, c.truncated.then_some(c.offset + c.returned));
    assert_eq!(c.path, format!("/skills/{}/{}", c.skill, c.file));
    let e = one_event(f, id);
    assert_eq!(e.kind, kind);
    assert_eq!(
        (e.skill.as_str(), e.file.as_str()),
        (c.skill.as_str(), c.file.as_str())
    );
    assert_eq!(
        (e.offset, e.bytes, e.truncated),
        (Some(c.offset), c.returned, c.truncated)
    );
}

/// The one event a successful activation appended (the log starts empty
/// for every input).
fn one_event(f: &Fixture, id: &str) -> Event {
    let mut events = f.host.events(id).expect("the events of a session").events;
    assert_eq!(events.len(), 1, "one event per activation: {events:?}");
    events.pop().expect("one event")
}
