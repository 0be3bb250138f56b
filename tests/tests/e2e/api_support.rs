//! What the API tests share: a server over the test database, GraphQL calls that either
//! return data or the error code, and the few setup steps (space, member, key, task)
//! every test starts from, all made through the public API.
use anyhow::{Context, anyhow, ensure};
use kfs_tests::TestDb;
use kfs_tests::server::{TestServer, first_error_code};
use serde_json::{Value, json};
use uuid::Uuid;

/// A running server and the tenant this test acts in (unique, so tests never share scope).
pub struct Api {
    /// The server and its HTTP client.
    pub server: TestServer,
    /// A tenant of this test's own.
    pub tenant: String,
}

impl Api {
    /// Starts a server (no embedded worker, so tasks stay where the test puts them).
    pub async fn start(db: &TestDb) -> anyhow::Result<Self> {
        let server = TestServer::start(&db.url, false).await?;
        Ok(Self { server, tenant: format!("tenant-{}", Uuid::new_v4().simple()) })
    }

    /// A JWT for `subject` in this test's tenant.
    pub fn token(&self, subject: &str) -> String {
        TestServer::token(subject, &self.tenant)
    }

    /// Runs a request and returns the whole response body.
    pub async fn call(&self, bearer: Option<&str>, query: &str, variables: Value) -> anyhow::Result<Value> {
        let (_, body) = self.server.post(bearer, query, variables).await?;
        Ok(body)
    }

    /// Runs a request that must succeed and returns its `data`.
    pub async fn data(&self, bearer: Option<&str>, query: &str, variables: Value) -> anyhow::Result<Value> {
        let body = self.call(bearer, query, variables).await?;
        ensure!(body.get("errors").is_none(), "unexpected errors for {query}: {body}");
        body.get("data").cloned().ok_or_else(|| anyhow!("no data: {body}"))
    }

    /// Runs a request that must fail and returns its first error's `extensions.code`.
    pub async fn code(&self, bearer: Option<&str>, query: &str, variables: Value) -> anyhow::Result<String> {
        let body = self.call(bearer, query, variables).await?;
        first_error_code(&body).ok_or_else(|| anyhow!("expected an error for {query}: {body}"))
    }

    /// Creates a space owned by `owner`; returns its id.
    pub async fn space(&self, owner: &str) -> anyhow::Result<String> {
        let data =
            self.data(Some(&self.token(owner)), CREATE_SPACE, json!({ "name": format!("{owner}'s space") })).await?;
        string_at(&data, "/createKnowledgeSpace/id")
    }

    /// Adds `subject` to the space with `role` (OWNER, EDITOR or VIEWER), as `owner`.
    pub async fn member(&self, owner: &str, space: &str, subject: &str, role: &str) -> anyhow::Result<()> {
        let variables = json!({ "input": { "knowledgeSpaceId": space, "subjectId": subject, "role": role } });
        self.data(Some(&self.token(owner)), ADD_MEMBER, variables).await.map(|_| ())
    }

    /// Creates an API key for the space as `owner`; returns its id and presented secret.
    pub async fn key(&self, owner: &str, space: &str) -> anyhow::Result<(String, String)> {
        let variables = json!({ "input": { "knowledgeSpaceId": space, "name": "ci" } });
        let data = self.data(Some(&self.token(owner)), CREATE_KEY, variables).await?;
        Ok((string_at(&data, "/createApiKey/apiKey/id")?, string_at(&data, "/createApiKey/secret")?))
    }

    /// Creates a task in the space as `bearer`; returns the task object.
    pub async fn task(&self, bearer: &str, space: &str) -> anyhow::Result<Value> {
        let variables = json!({ "input": { "knowledgeSpaceId": space, "query": "How do leases work?" } });
        let data = self.data(Some(bearer), CREATE_TASK, variables).await?;
        data.pointer("/createResearchTask").cloned().context("no task in the answer")
    }

    /// Stops the server.
    pub async fn stop(self) {
        self.server.stop().await;
    }
}

/// The string at a JSON pointer.
pub fn string_at(value: &Value, pointer: &str) -> anyhow::Result<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no string at {pointer} in {value}"))
}

/// `createKnowledgeSpace(name)`.
pub const CREATE_SPACE: &str =
    "mutation($name: String!) { createKnowledgeSpace(input: {name: $name}) { id name viewerRole } }";
/// `addKnowledgeSpaceMember(input)`.
pub const ADD_MEMBER: &str = "mutation($input: AddKnowledgeSpaceMemberInput!) { addKnowledgeSpaceMember(input: $input) { subjectId role revision } }";
/// `createApiKey(input)`.
pub const CREATE_KEY: &str =
    "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { secret apiKey { id revision } } }";
/// `createResearchTask(input)`.
pub const CREATE_TASK: &str = "mutation($input: CreateResearchTaskInput!) { \
    createResearchTask(input: $input) { id stage rowVersion query knowledgeSpaceId } }";
/// `researchTask(id)`.
pub const READ_TASK: &str = "query($id: UUID!) { researchTask(id: $id) { id stage rowVersion } }";
/// `researchTasks(knowledgeSpaceId)`.
pub const LIST_TASKS: &str =
    "query($space: UUID!) { researchTasks(knowledgeSpaceId: $space) { edges { node { id } } } }";
/// `cancelResearchTask(id, expectedRowVersion)`.
pub const CANCEL: &str =
    "mutation($id: UUID!, $v: Int) { cancelResearchTask(id: $id, expectedRowVersion: $v) { id stage rowVersion } }";
/// `pauseResearchTask(id, expectedRowVersion)`.
pub const PAUSE: &str = "mutation($id: UUID!, $v: Int) { pauseResearchTask(id: $id, expectedRowVersion: $v) { id stage rowVersion pausedFromStage } }";
/// `resumeResearchTask(id, expectedRowVersion)`.
pub const RESUME: &str =
    "mutation($id: UUID!, $v: Int) { resumeResearchTask(id: $id, expectedRowVersion: $v) { id stage rowVersion } }";
