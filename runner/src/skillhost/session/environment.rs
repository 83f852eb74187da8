//! A session's environment (docs/skill-host.md, "Environment"): the one
//! its skills declare in their `SKILL.md` (`metadata.environment`), or
//! the one the request names, decided when the session is created and
//! recorded with it; every job of the session then runs with it.
//!
//! Invariants (pure):
//! - skills declaring different environments, or a request naming one
//!   that a skill's declaration contradicts, refuse the session before
//!   anything is frozen;
//! - a job of a session with an environment gets that environment; a job
//!   naming another one is refused naming both, never run with either.

use super::SessionError;
use crate::exec::job::Job;
use crate::package::environment::EnvRef;

/// `ID@HASH`, as `env list` prints it and a skill declares it.
pub fn spelled(env: &EnvRef) -> String {
    format!("{}@{}", env.id, env.hash)
}

/// The environment of a new session: the one the request names, else the
/// one its skills declare; `declared` is each skill's id and declaration.
pub(super) fn decide(
    named: Option<EnvRef>,
    declared: &[(String, Option<EnvRef>)],
) -> Result<Option<EnvRef>, SessionError> {
    let mut found: Option<(&str, &EnvRef)> = None;
    for (skill, env) in declared {
        let Some(env) = env else { continue };
        match found {
            None => found = Some((skill, env)),
            Some((first_skill, first)) if first != env => {
                return Err(SessionError::EnvironmentsDiffer {
                    first_skill: first_skill.to_owned(),
                    first: spelled(first),
                    other_skill: skill.clone(),
                    other: spelled(env),
                })
            }
            Some(_) => {}
        }
    }
    match (named, found) {
        (Some(named), Some((skill, env))) if named != *env => {
            Err(SessionError::EnvironmentNotDeclared {
                named: spelled(&named),
                skill: skill.to_owned(),
                declared: spelled(env),
            })
        }
        (Some(named), _) => Ok(Some(named)),
        (None, found) => Ok(found.map(|(_, env)| env.clone())),
    }
}

/// Gives a job of session `session` the session's `frozen` environment,
/// or refuses it when it names another one.
pub(super) fn for_job(
    session: &str,
    frozen: Option<&EnvRef>,
    job: &mut Job,
) -> Result<(), SessionError> {
    let Some(frozen) = frozen else {
        return Ok(());
    };
    match &job.environment {
        None => job.environment = Some(frozen.clone()),
        Some(asked) if asked == frozen => {}
        Some(asked) => {
            return Err(SessionError::JobEnvironment {
                session: session.to_owned(),
                frozen: spelled(frozen),
                asked: spelled(asked),
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(id: &str, c: char) -> EnvRef {
        EnvRef {
            id: id.into(),
            hash: c.to_string().repeat(64),
        }
    }

    #[test]
    fn a_session_takes_the_named_or_the_declared_environment_and_refuses_a_contradiction() {
        let (a, b) = (env("pdf", 'a'), env("gif", 'b'));
        let decl = |d: &[Option<EnvRef>]| -> Vec<(String, Option<EnvRef>)> {
            d.iter()
                .enumerate()
                .map(|(i, e)| (format!("s{i}"), e.clone()))
                .collect()
        };
        assert_eq!(decide(None, &decl(&[None, None])).unwrap(), None);
        assert_eq!(
            decide(None, &decl(&[None, Some(a.clone()), Some(a.clone())])).unwrap(),
            Some(a.clone())
        );
        assert_eq!(
            decide(Some(b.clone()), &decl(&[None])).unwrap(),
            Some(b.clone())
        );
        assert_eq!(
            decide(Some(a.clone()), &decl(&[Some(a.clone())])).unwrap(),
            Some(a.clone())
        );
        let e = decide(None, &decl(&[Some(a.clone()), Some(b.clone())])).unwrap_err();
        assert!(
            e.to_string().contains("s0") && e.to_string().contains("s1"),
            "{e}"
        );
        let e = decide(Some(b.clone()), &decl(&[Some(a.clone())])).unwrap_err();
        assert!(e.to_string().contains(&spelled(&b)), "{e}");
        assert!(e.to_string().contains(&spelled(&a)), "{e}");
    }

    #[test]
    fn a_job_gets_the_frozen_environment_and_naming_another_is_refused() {
        let (a, b) = (env("pdf", 'a'), env("gif", 'b'));
        let job = |e: Option<&EnvRef>| {
            let mut doc = serde_json::json!({"argv": ["true"]});
            if let Some(e) = e {
                doc["environment"] = serde_json::to_value(e).unwrap();
            }
            Job::from_json(doc.to_string().as_bytes(), None).unwrap()
        };
        let mut j = job(None);
        for_job("ses-x", Some(&a), &mut j).unwrap();
        assert_eq!(j.environment, Some(a.clone()));
        let mut j = job(Some(&a));
        for_job("ses-x", Some(&a), &mut j).unwrap();
        let mut j = job(Some(&b));
        let e = for_job("ses-x", Some(&a), &mut j).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::BadJob);
        assert!(e.to_string().contains("ses-x"), "{e}");
        let mut j = job(Some(&b));
        for_job("ses-x", None, &mut j).unwrap();
        assert_eq!(j.environment, Some(b));
    }
}
