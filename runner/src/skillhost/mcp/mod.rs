//! One frozen session served over the Model Context Protocol
//! (docs/mcp.md), with the official Rust SDK (`rmcp`): the same server
//! behind `skill-runner mcp --session ID` (stdio, [`serve_stdio`]) and
//! the daemon's `/v1/sessions/{id}/mcp` (Streamable HTTP, `daemon::mcp`).
//!
//! | MCP method | answered from |
//! |---|---|
//! | `tools/list` | the session record's tool schemas, then `run` |
//! | `tools/call` (a session tool) | [`tools::call`], the tool route's function |
//! | `tools/call` `run` | a job naming the session, through an [`Execute`] |
//! | `skills/list`, `skills/get` | [`SessionHost::frozen`]: the stored packages' indexes |
//! | `resources/list`, `resources/read` | the same packages, read by [`resource::frozen_bytes`] |
//!
//! Invariants:
//! - the tools are the session's and `run`, nothing else: a skill's
//!   `allowed-tools` front matter adds none (discovery grants no
//!   authority);
//! - a file's `sha256:` digest is its stored index hash, and a read
//!   serves it only when its bytes hash to it: the bytes a client verifies
//!   are the bytes the sandbox mounts;
//! - a `run` is a job with `session` set to this session, admitted as any
//!   other job by whoever executes it (limits, paths, outputs), so no MCP
//!   call can widen what the session's jobs may do;
//! - a client's `notifications/cancelled` cancels the execution, and the
//!   call returns only after the execution has ended.

pub mod local;

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use base64::Engine;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    GetSkillRequestParams, GetSkillResult, Implementation, JsonObject, ListResourcesResult,
    ListSkillsResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Skill, SkillFrontmatter, SkillResource,
    SkillResources, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::session::resource::frozen_bytes;
use super::session::tools::{self, ToolError};
use super::session::{SessionError, SessionHost};
use crate::package::format::SKILL_MD;

/// The tool that runs a command in the session's sandbox.
pub const RUN_TOOL: &str = "run";

/// Bytes of stdout (and of stderr) a `run` answer's text shows; the
/// structured result holds all of what the execution captured.
pub const TEXT_OUTPUT_BYTES: usize = 16 * 1024;

/// The protocol revisions served: up to 2025-11-25, the last with
/// sessions, which the Streamable HTTP route needs to route a client's
/// cancellation to the call it cancels.
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

/// Output of a running execution, as it arrives.
#[derive(Debug, Clone, Copy)]
pub struct RunProgress {
    /// Output bytes so far (both streams).
    pub bytes: u64,
    /// Output events so far.
    pub events: u64,
}

/// Reports progress of one execution.
pub type ProgressFn = Box<dyn Fn(RunProgress) + Send + Sync>;

/// The boxed future of [`Execute::execute`].
pub type Execution = Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>;

/// Runs one job document for the server: the daemon's execution route,
/// or a runner in this process.
pub trait Execute: Send + Sync + 'static {
    /// Runs `job` (a job document naming the session) and answers its
    /// result document, or the refusal's sentence when there is no result
    /// document. `progress`, when the client asked for it, hears of output
    /// as it comes. `cancel` fires when the client cancels: the future
    /// then ends once the execution has.
    fn execute(
        &self,
        job: Value,
        progress: Option<ProgressFn>,
        cancel: CancellationToken,
    ) -> Execution;
}

/// How the server finds the session it serves.
pub trait SessionOf: Send + Sync + 'static {
    /// The session of this request, checked (not expired) and touched.
    fn session(&self, context: &RequestContext<RoleServer>) -> Result<String, McpError>;
}

/// One session, named up front (stdio).
#[derive(Debug)]
pub struct Fixed(pub String);

impl SessionOf for Fixed {
    fn session(&self, _: &RequestContext<RoleServer>) -> Result<String, McpError> {
        Ok(self.0.clone())
    }
}

/// The MCP server of a session.
#[derive(Clone)]
pub struct McpServer {
    host: Arc<SessionHost>,
    exec: Arc<dyn Execute>,
    session: Arc<dyn SessionOf>,
}

/// Why a request could not be served at all.
#[derive(Debug, thiserror::Error)]
pub enum McpServeError {
    #[error("serving MCP on stdio: {0}")]
    Stdio(String),
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("McpServer")
    }
}

impl McpServer {
    pub fn new(
        host: Arc<SessionHost>,
        exec: Arc<dyn Execute>,
        session: Arc<dyn SessionOf>,
    ) -> McpServer {
        McpServer {
            host,
            exec,
            session,
        }
    }

    /// Runs `work` against the host on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&SessionHost) -> Result<T, McpError> + Send + 'static,
    ) -> Result<T, McpError> {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || work(&host))
            .await
            .map_err(|e| {
                McpError::internal_error(format!("the session thread failed: {e}"), None)
            })?
    }

    async fn run(
        &self,
        id: String,
        input: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let job = match run_job(&id, input) {
            Ok(j) => j,
            Err(m) => return Ok(CallToolResult::error(vec![Content::text(m)])),
        };
        let progress: Option<ProgressFn> = match context.meta.get_progress_token() {
            None => None,
            Some(token) => {
                let peer = context.peer.clone();
                let rt = tokio::runtime::Handle::current();
                Some(Box::new(move |p: RunProgress| {
                    let peer = peer.clone();
                    let token = token.clone();
                    rt.spawn(async move {
                        let _ = peer
                            .notify_progress(
                                ProgressNotificationParam::new(token, p.events as f64)
                                    .with_message(format!("{} bytes of output", p.bytes)),
                            )
                            .await;
                    });
                }))
            }
        };
        match self.exec.execute(job, progress, context.ct.clone()).await {
            Ok(result) => Ok(run_answer(result)),
            Err(m) => Ok(CallToolResult::error(vec![Content::text(m)])),
        }
    }
}

/// The `run` tool's input schema.
fn run_schema() -> JsonObject {
    let v = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["argv"],
        "properties": {
            "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                     "description": "The command and its arguments; the session's skills are under /skills/<id>/."},
            "stdin": {"type": "string", "description": "Text fed to the command's standard input."},
            "files": {"type": "array", "items": {"type": "object"},
                      "description": "Input files, as the job's files field (docs/formats.md)."},
            "outputs": {"type": "array", "items": {"type": "string"},
                        "description": "Paths under /outputs/ to collect, as the job's outputs field."},
            "limits": {"type": "object",
                       "description": "Resource limits, as the job's limits field; within what this runner allows."}
        }
    });
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// The job document of a `run` call: the input's fields, checked to be
/// only those the tool offers, with the session set.
pub fn run_job(session: &str, input: JsonObject) -> Result<Value, String> {
    const FIELDS: [&str; 5] = ["argv", "stdin", "files", "outputs", "limits"];
    if let Some(k) = input.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "run has no input {:?}; give argv, and stdin, files, outputs or limits if needed",
            crate::text::single_line(k)
        ));
    }
    if !input.contains_key("argv") {
        return Err("run needs argv, the command and its arguments as a list of strings".into());
    }
    let mut job = input;
    job.insert("session".into(), Value::String(session.to_owned()));
    Ok(Value::Object(job))
}

/// Cuts `text` to at most `max` bytes on a character boundary, saying so.
fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}\n[{} of {} bytes shown]",
        &text[..end],
        end,
        text.len()
    ))
}

/// A result document as a tool answer: a text a model reads, and the
/// document itself as structured content.
pub fn run_answer(result: Value) -> CallToolResult {
    let s = |k: &str| result.get(k).and_then(Value::as_str).unwrap_or("");
    let status = s("status");
    let mut text = match result.get("exit_code").and_then(Value::as_i64) {
        Some(code) => format!("status {status}, exit code {code}"),
        None => format!("status {status}"),
    };
    if let Some(ms) = result.get("duration_ms").and_then(Value::as_u64) {
        text.push_str(&format!(", {ms} ms"));
    }
    text.push('\n');
    if let Some(e) = result.get("error").filter(|e| !e.is_null()) {
        let kind = e.get("kind").and_then(Value::as_str).unwrap_or("error");
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        text.push_str(&format!("error: {kind}: {message}\n"));
    }
    for (name, truncated) in [
        ("stdout", "stdout_truncated"),
        ("stderr", "stderr_truncated"),
    ] {
        let out = s(name);
        if out.is_empty() {
            continue;
        }
        text.push_str(&format!("--- {name} ---\n{}", cut(out, TEXT_OUTPUT_BYTES)));
        if !out.ends_with('\n') {
            text.push('\n');
        }
        if result.get(truncated).and_then(Value::as_bool) == Some(true) {
            text.push_str(&format!("[{name} passed the job's output_bytes]\n"));
        }
    }
    let failed = status != "exited" || result.get("exit_code").and_then(Value::as_i64) != Some(0);
    let mut answer = if failed {
        CallToolResult::error(vec![Content::text(text)])
    } else {
        CallToolResult::success(vec![Content::text(text)])
    };
    answer.structured_content = Some(result);
    answer
}

/// `skill://<id>/<path>`.
pub fn skill_uri(skill: &str, path: &str) -> String {
    format!("skill://{skill}/{path}")
}

/// The media type a client is told for a file.
fn mime_of(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("md") => "text/markdown",
        Some("py") => "text/x-python",
        Some("sh") => "text/x-shellscript",
        Some("json") => "application/json",
        Some("txt") => "text/plain",
        _ => "application/octet-stream",
    }
}

fn session_error(e: SessionError) -> McpError {
    if e.kind().is_host_fault() {
        McpError::internal_error(e.to_string(), None)
    } else {
        McpError::invalid_params(e.to_string(), None)
    }
}

/// Every frozen skill of `id` as the Skills extension lists it.
fn frozen_skills(host: &SessionHost, id: &str) -> Result<Vec<Skill>, McpError> {
    let frozen = host.frozen(id).map_err(session_error)?;
    Ok(frozen
        .iter()
        .map(|(s, pkg)| {
            let name = &s.binding.id;
            let files = pkg
                .files
                .iter()
                .map(|f| {
                    SkillResource::new(
                        skill_uri(name, &f.path),
                        format!("sha256:{}", f.hash),
                        f.size,
                    )
                })
                .collect();
            let frontmatter = SkillFrontmatter::new(name.clone(), s.description.clone())
                .with_field("version", s.binding.version.clone())
                .with_field("revision", s.binding.revision)
                .with_field("package-hash", s.binding.hash.clone());
            Skill::new(
                skill_uri(name, SKILL_MD),
                frontmatter,
                SkillResources::Files(files),
            )
        })
        .collect())
}

/// The bytes of `uri` in session `id`: a file of one of its frozen
/// packages, never anything else.
fn read_uri(host: &SessionHost, id: &str, uri: &str) -> Result<ReadResourceResult, McpError> {
    let not_found = |why: String| McpError::resource_not_found(why, Some(json!({ "uri": uri })));
    let Some((skill, path)) = uri
        .strip_prefix("skill://")
        .and_then(|rest| rest.split_once('/'))
    else {
        return Err(not_found(format!(
            "{} is not a skill:// resource of this session; list them with resources/list",
            crate::text::single_line(uri)
        )));
    };
    let frozen = host.frozen(id).map_err(session_error)?;
    let Some((_, pkg)) = frozen.iter().find(|(s, _)| s.binding.id == skill) else {
        return Err(not_found(format!(
            "session {id} has no skill {:?}; its skills are: {}",
            crate::text::single_line(skill),
            frozen
                .iter()
                .map(|(s, _)| s.binding.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let Some(entry) = pkg.files.iter().find(|f| f.path == path) else {
        return Err(not_found(format!(
            "{} is not a file of skill {skill}; its files are listed by skills/get",
            crate::text::single_line(path)
        )));
    };
    let bytes = frozen_bytes(pkg, entry).map_err(session_error)?;
    let contents = match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => ResourceContents::text(text, uri),
        Ok(text) => ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
            uri,
        ),
        Err(e) => ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            uri,
        ),
    };
    Ok(ReadResourceResult::new(vec![
        contents.with_mime_type(mime_of(path))
    ]))
}

fn tool_of(schema: &Value) -> Option<Tool> {
    let name = schema.get("name")?.as_str()?.to_owned();
    let description = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let input = match schema.get("input_schema") {
        Some(Value::Object(o)) => o.clone(),
        _ => JsonObject::new(),
    };
    Some(Tool::new(name, description, Arc::new(input)))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_skills()
                .build(),
        )
        .with_server_info(Implementation::new(
            "skill-runner",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "The skills of one frozen skill-runner session: find and load them with the \
             session's tools or the Skills extension, and run their scripts with the run tool.",
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let id = self.session.session(&context)?;
        let record = self
            .blocking(move |host| host.sessions().read(&id).map_err(session_error))
            .await?;
        let mut tools: Vec<Tool> = record.tools.iter().filter_map(tool_of).collect();
        tools.push(Tool::new(
            RUN_TOOL,
            "Run a command in this session's sandbox, with its skills mounted read-only \
             under /skills/<id>/; answers the exit code and output, and the whole result \
             document as structured content.",
            Arc::new(run_schema()),
        ));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let id = self.session.session(&context)?;
        let input = request.arguments.unwrap_or_default();
        let name = request.name.to_string();
        if name == RUN_TOOL {
            return self.run(id, input, context).await.map(Into::into);
        }
        let answer = self
            .blocking(move |host| {
                match tools::call(host, &id, &name, &Value::Object(input)) {
                    Ok(a) => Ok(a),
                    Err(ToolError::UnknownTool {
                        session,
                        tool,
                        known,
                    }) => Err(McpError::invalid_params(
                        format!("session {session} has no tool {tool:?}; its tools are: {known}, {RUN_TOOL}"),
                        None,
                    )),
                    Err(ToolError::Session(e)) => Err(session_error(e)),
                }
            })
            .await?;
        let content = vec![Content::text(answer.content)];
        Ok(if answer.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let id = self.session.session(&context)?;
        let frozen = self
            .blocking(move |host| host.frozen(&id).map_err(session_error))
            .await?;
        let resources = frozen
            .iter()
            .flat_map(|(s, pkg)| {
                pkg.files.iter().map(move |f| {
                    Resource::new(skill_uri(&s.binding.id, &f.path), f.path.clone())
                        .with_mime_type(mime_of(&f.path))
                        .with_size(f.size)
                })
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let id = self.session.session(&context)?;
        let uri = request.uri;
        self.blocking(move |host| read_uri(host, &id, &uri))
            .await
            .map(Into::into)
    }

    async fn list_skills(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        let id = self.session.session(&context)?;
        let skills = self.blocking(move |host| frozen_skills(host, &id)).await?;
        Ok(ListSkillsResult::with_all_items(skills))
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        let id = self.session.session(&context)?;
        let skills = self.blocking(move |host| frozen_skills(host, &id)).await?;
        let uri = request.uri;
        skills
            .into_iter()
            .find(|s| s.uri == uri)
            .map(GetSkillResult::new)
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!(
                        "this session serves no skill at {}; list them with skills/list",
                        crate::text::single_line(&uri)
                    ),
                    None,
                )
            })
    }
}

/// Serves `server` on this process's stdin and stdout until the client
/// closes them.
pub async fn serve_stdio(server: McpServer) -> Result<(), McpServeError> {
    use rmcp::ServiceExt;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpServeError::Stdio(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpServeError::Stdio(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: Value) -> JsonObject {
        match v {
            Value::Object(o) => o,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_run_is_a_job_of_the_session_with_only_the_offered_fields() {
        let job = run_job("ses-1", object(json!({"argv": ["true"], "stdin": "x"}))).unwrap();
        assert_eq!(
            job,
            json!({"argv": ["true"], "stdin": "x", "session": "ses-1"})
        );
        // The session is the server's, never the caller's.
        let e = run_job(
            "ses-1",
            object(json!({"argv": ["true"], "session": "ses-2"})),
        )
        .unwrap_err();
        assert!(e.contains("no input \"session\""), "{e}");
        let e = run_job("ses-1", object(json!({"argv": ["true"], "workspace": "/"}))).unwrap_err();
        assert!(e.contains("no input \"workspace\""), "{e}");
        let e = run_job("ses-1", object(json!({"stdin": "x"}))).unwrap_err();
        assert!(e.contains("needs argv"), "{e}");
    }

    #[test]
    fn a_run_answer_cuts_long_output_on_a_character_boundary_and_keeps_the_document() {
        let long = "é".repeat(TEXT_OUTPUT_BYTES);
        let doc = json!({"status": "exited", "exit_code": 0, "stdout": long, "stderr": ""});
        let answer = run_answer(doc.clone());
        assert_eq!(answer.is_error, Some(false));
        assert_eq!(answer.structured_content, Some(doc));
        let text = serde_json::to_value(&answer.content[0]).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            text.contains(&format!(
                "[{TEXT_OUTPUT_BYTES} of {} bytes shown]",
                2 * TEXT_OUTPUT_BYTES
            )),
            "{}",
            &text[text.len() - 80..]
        );
        let failed =
            run_answer(json!({"status": "exited", "exit_code": 2, "stdout": "", "stderr": "no\n"}));
        assert_eq!(failed.is_error, Some(true));
        let refused = run_answer(json!({"status": "rejected", "exit_code": null,
            "error": {"kind": "bad_job", "message": "argv is empty"}}));
        assert_eq!(refused.is_error, Some(true));
        let text = serde_json::to_value(&refused.content[0]).unwrap()["text"].clone();
        assert!(
            text.as_str()
                .unwrap()
                .contains("error: bad_job: argv is empty"),
            "{text}"
        );
    }
}
