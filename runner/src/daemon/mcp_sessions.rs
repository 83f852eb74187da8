//! The daemon's MCP sessions (`/v1/sessions/{id}/mcp`, docs/mcp.md):
//! rmcp's in-memory session manager, bounded.
//!
//! - At most `mcp_sessions` MCP sessions live at once in the daemon, and
//!   `mcp_sessions_per_session` of them for one daemon session; an
//!   `initialize` beyond either is refused before any session is made
//!   (429 `busy`, `Retry-After`).
//! - The route [`Sessions::reserve`]s a place before it hands an
//!   `initialize` to the transport, which takes it in
//!   [`SessionManager::create_session`] (the same task: a task-local); a
//!   request that made no session gives its place back.
//! - A place is freed when its MCP session closes: a `DELETE` with its
//!   `Mcp-Session-Id`, its worker ending (idle for the keep-alive, or
//!   gone), or [`Sessions::end_session`] when its daemon session is
//!   deleted or expires, which also closes them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

/// Failures of the bounded session manager.
#[derive(Debug, thiserror::Error)]
pub enum McpSessionsError {
    #[error("creating an MCP session: the request reserved no place for it")]
    CreateUnreserved,
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// How many MCP sessions may live at once.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// In the whole daemon.
    pub total: usize,
    /// For one daemon session.
    pub per_session: usize,
}

#[derive(Debug, Default)]
struct Live {
    /// Each MCP session's daemon session.
    owners: HashMap<String, String>,
    /// Places taken (reserved or bound) per daemon session.
    per: HashMap<String, usize>,
    /// Places taken in all.
    total: usize,
}

impl Live {
    fn release(&mut self, owner: &str) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per.get_mut(owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per.remove(owner);
            }
        }
    }
}

/// The bounded MCP session manager, shared by the route and the session
/// routes that end daemon sessions.
#[derive(Debug)]
pub struct Sessions {
    inner: LocalSessionManager,
    caps: Caps,
    live: Mutex<Live>,
}

/// Which cap an `initialize` met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Total(usize),
    PerSession(usize),
}

/// A place for one MCP session, given back on drop unless bound.
#[derive(Debug)]
pub struct Reservation {
    sessions: Arc<Sessions>,
    owner: String,
    bound: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.bound {
            self.sessions.lock().release(&self.owner);
        }
    }
}

tokio::task_local! {
    /// The place of the `initialize` being served in this task.
    pub static RESERVED: RefCell<Option<Reservation>>;
}

impl Sessions {
    /// A manager whose sessions end after `keep_alive` without traffic.
    pub fn new(caps: Caps, keep_alive: std::time::Duration) -> Arc<Sessions> {
        let mut inner = LocalSessionManager::default();
        inner.session_config = SessionConfig::default();
        inner.session_config.keep_alive = Some(keep_alive);
        Arc::new(Sessions {
            inner,
            caps,
            live: Mutex::new(Live::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new MCP session of daemon session `owner`, or the
    /// cap it would pass.
    pub fn reserve(self: &Arc<Self>, owner: &str) -> Result<Reservation, Full> {
        let mut live = self.lock();
        if live.total >= self.caps.total {
            return Err(Full::Total(self.caps.total));
        }
        let n = live.per.entry(owner.to_owned()).or_default();
        if *n >= self.caps.per_session {
            return Err(Full::PerSession(self.caps.per_session));
        }
        *n += 1;
        live.total += 1;
        Ok(Reservation {
            sessions: self.clone(),
            owner: owner.to_owned(),
            bound: false,
        })
    }

    /// MCP sessions live now.
    pub fn live(&self) -> usize {
        self.lock().owners.len()
    }

    /// Frees and closes the MCP sessions of daemon session `owner`
    /// (deleted, or expired).
    pub fn end_session(self: &Arc<Self>, owner: &str) {
        let ids: Vec<String> = {
            let mut live = self.lock();
            let ids: Vec<String> = live
                .owners
                .iter()
                .filter(|(_, o)| o.as_str() == owner)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &ids {
                live.owners.remove(id);
                live.release(owner);
            }
            ids
        };
        if ids.is_empty() {
            return;
        }
        tracing::debug!(session = %owner, mcp = ids.len(), "closing the session's MCP sessions");
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        rt.spawn(async move {
            for id in ids {
                let _ = this.inner.close_session(&SessionId::from(id)).await;
            }
        });
    }

    /// Forgets MCP session `id`, giving its place back.
    fn forget(&self, id: &SessionId) {
        let mut live = self.lock();
        if let Some(owner) = live.owners.remove(id.as_ref()) {
            live.release(&owner);
        }
    }
}

impl SessionManager for Sessions {
    type Error = McpSessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let Some(mut place) = RESERVED.try_with(|r| r.borrow_mut().take()).ok().flatten() else {
            return Err(McpSessionsError::CreateUnreserved);
        };
        let (id, transport) = self.inner.create_session().await?;
        self.lock()
            .owners
            .insert(id.to_string(), place.owner.clone());
        place.bound = true;
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        // A session freed by its daemon session's end is gone.
        if !self.lock().owners.contains_key(id.as_ref()) {
            return Ok(false);
        }
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.forget(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        _id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // No external store: a session unknown here stays unknown.
        Ok(RestoreOutcome::NotSupported)
    }
}
