//! The authorization matrix: tasks, journals and traces belong to the subject that made
//! them, in its tenant and space, while its grant holds; anything else answers exactly as
//! a missing id does (null for reads, NOT_FOUND for mutations).
use anyhow::ensure;
use entity::{answer_trace, api_key, now_millis};
use kfs_tests::{DbTest, TestDb, db_tests};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::{Api, CANCEL, LIST_TASKS, READ_TASK, string_at};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        an_anonymous_caller_is_unauthenticated,
        only_the_creator_sees_a_task_and_others_get_what_a_missing_id_gets,
        an_api_key_sees_only_its_space_and_its_own_tasks,
        rotating_a_key_kills_the_old_secret_and_the_grants_issued_under_it,
        revoked_and_expired_keys_are_unauthenticated,
        a_removed_member_loses_their_tasks_and_re_adding_does_not_revive_them,
        legacy_and_foreign_answer_traces_are_never_returned,
        roles_decide_who_manages_members_keys_and_documents,
        pages_skip_tasks_whose_grant_died_and_still_fill_up,
    ]
}

async fn an_anonymous_caller_is_unauthenticated(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let id = json!({ "id": Uuid::now_v7() });
    ensure!(api.code(None, "{ viewer { subjectId } }", json!({})).await? == "UNAUTHENTICATED");
    ensure!(api.code(None, READ_TASK, id.clone()).await? == "UNAUTHENTICATED");
    ensure!(api.code(None, CANCEL, id).await? == "UNAUTHENTICATED");
    let create = "mutation { createKnowledgeSpace(input: {name: \"x\"}) { id } }";
    ensure!(api.code(None, create, json!({})).await? == "UNAUTHENTICATED");
    api.stop().await;
    Ok(())
}

async fn only_the_creator_sees_a_task_and_others_get_what_a_missing_id_gets(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "OWNER").await?;
    let task = api.task(&api.token("alice"), &space).await?;
    let id = json!({ "id": task["id"] });

    let mine = api.data(Some(&api.token("alice")), READ_TASK, id.clone()).await?;
    ensure!(mine["researchTask"]["id"] == task["id"], "{mine}");
    // Another owner of the same space, a stranger in another tenant with the same subject
    // id, and a missing id all answer alike.
    let foreign = kfs_tests::server::TestServer::token("alice", "another-tenant");
    for bearer in [api.token("bob"), foreign] {
        let theirs = api.data(Some(&bearer), READ_TASK, id.clone()).await?;
        ensure!(theirs["researchTask"].is_null(), "{theirs}");
        let list = api.data(Some(&bearer), LIST_TASKS, json!({ "space": space })).await?;
        ensure!(list["researchTasks"]["edges"] == json!([]), "{list}");
        ensure!(api.code(Some(&bearer), CANCEL, id.clone()).await? == "NOT_FOUND");
    }
    let missing = json!({ "id": Uuid::now_v7() });
    ensure!(api.data(Some(&api.token("alice")), READ_TASK, missing.clone()).await?["researchTask"].is_null());
    ensure!(api.code(Some(&api.token("alice")), CANCEL, missing).await? == "NOT_FOUND");
    api.stop().await;
    Ok(())
}

async fn an_api_key_sees_only_its_space_and_its_own_tasks(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let other_space = api.space("alice").await?;
    let (key_id, secret) = api.key("alice", &space).await?;
    let viewer = api.data(Some(&secret), "{ viewer { subjectId channel } }", json!({})).await?;
    ensure!(
        viewer["viewer"] == json!({ "subjectId": format!("api_key:{key_id}"), "channel": "SERVICE_API" }),
        "{viewer}"
    );

    let key_task = api.task(&secret, &space).await?;
    let owner_task = api.task(&api.token("alice"), &space).await?;
    let seen = api.data(Some(&secret), READ_TASK, json!({ "id": key_task["id"] })).await?;
    ensure!(seen["researchTask"]["id"] == key_task["id"], "{seen}");
    let hidden = api.data(Some(&secret), READ_TASK, json!({ "id": owner_task["id"] })).await?;
    ensure!(hidden["researchTask"].is_null(), "{hidden}");
    let from_owner = api.data(Some(&api.token("alice")), READ_TASK, json!({ "id": key_task["id"] })).await?;
    ensure!(from_owner["researchTask"].is_null(), "{from_owner}");

    let elsewhere = json!({ "input": { "knowledgeSpaceId": other_space, "query": "q" } });
    ensure!(api.code(Some(&secret), crate::api_support::CREATE_TASK, elsewhere).await? == "NOT_FOUND");
    let spaces = api.data(Some(&secret), "{ knowledgeSpaces { edges { node { id viewerRole } } } }", json!({})).await?;
    ensure!(spaces["knowledgeSpaces"]["edges"] == json!([{ "node": { "id": space, "viewerRole": null } }]), "{spaces}");
    let other = api
        .data(Some(&secret), "query($id: UUID!) { knowledgeSpace(id: $id) { id } }", json!({ "id": other_space }))
        .await?;
    ensure!(other["knowledgeSpace"].is_null(), "{other}");
    ensure!(
        api.code(Some(&secret), "mutation { createKnowledgeSpace(input: {name: \"k\"}) { id } }", json!({})).await?
            == "FORBIDDEN"
    );
    api.stop().await;
    Ok(())
}

async fn rotating_a_key_kills_the_old_secret_and_the_grants_issued_under_it(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let (key_id, old_secret) = api.key("alice", &space).await?;
    let task = api.task(&old_secret, &space).await?;
    let rotate = "mutation($id: UUID!) { rotateApiKey(id: $id) { secret apiKey { revision } } }";
    let rotated = api.data(Some(&api.token("alice")), rotate, json!({ "id": key_id })).await?;
    ensure!(rotated["rotateApiKey"]["apiKey"]["revision"] == 2, "{rotated}");
    let new_secret = string_at(&rotated, "/rotateApiKey/secret")?;

    ensure!(api.code(Some(&old_secret), "{ viewer { subjectId } }", json!({})).await? == "UNAUTHENTICATED");
    // Same subject, but the task's grant recorded revision 1: it no longer holds.
    let read = api.data(Some(&new_secret), READ_TASK, json!({ "id": task["id"] })).await?;
    ensure!(read["researchTask"].is_null(), "{read}");
    let fresh = api.task(&new_secret, &space).await?;
    let read = api.data(Some(&new_secret), READ_TASK, json!({ "id": fresh["id"] })).await?;
    ensure!(read["researchTask"]["id"] == fresh["id"], "{read}");
    api.stop().await;
    Ok(())
}

async fn revoked_and_expired_keys_are_unauthenticated(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let (revoked_id, revoked) = api.key("alice", &space).await?;
    let (expired_id, expired) = api.key("alice", &space).await?;
    let revoke = "mutation($id: UUID!) { revokeApiKey(id: $id) { revokedAt } }";
    let answer = api.data(Some(&api.token("alice")), revoke, json!({ "id": revoked_id })).await?;
    ensure!(!answer["revokeApiKey"]["revokedAt"].is_null(), "{answer}");
    api_key::Entity::update_many()
        .col_expr(api_key::Column::ExpiresAt, Expr::value(now_millis() - 1_000))
        .filter(api_key::Column::Id.eq(expired_id.parse::<Uuid>()?))
        .exec(&db.db)
        .await?;
    for secret in [revoked, expired] {
        ensure!(api.code(Some(&secret), "{ viewer { subjectId } }", json!({})).await? == "UNAUTHENTICATED");
    }
    let rotate = "mutation($id: UUID!) { rotateApiKey(id: $id) { secret } }";
    ensure!(api.code(Some(&api.token("alice")), rotate, json!({ "id": revoked_id })).await? == "CONFLICT");
    api.stop().await;
    Ok(())
}

async fn a_removed_member_loses_their_tasks_and_re_adding_does_not_revive_them(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let old = api.task(&api.token("bob"), &space).await?;
    let remove =
        "mutation($s: UUID!, $who: String!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $s, subjectId: $who) }";
    let removed = api.data(Some(&api.token("alice")), remove, json!({ "s": space, "who": "bob" })).await?;
    ensure!(removed["removeKnowledgeSpaceMember"] == true, "{removed}");
    let bob = api.token("bob");
    ensure!(api.data(Some(&bob), READ_TASK, json!({ "id": old["id"] })).await?["researchTask"].is_null());
    let space_read =
        api.data(Some(&bob), "query($id: UUID!) { knowledgeSpace(id: $id) { id } }", json!({ "id": space })).await?;
    ensure!(space_read["knowledgeSpace"].is_null(), "{space_read}");

    api.member("alice", &space, "bob", "VIEWER").await?;
    ensure!(api.data(Some(&bob), READ_TASK, json!({ "id": old["id"] })).await?["researchTask"].is_null());
    let new = api.task(&bob, &space).await?;
    let list = api.data(Some(&bob), LIST_TASKS, json!({ "space": space })).await?;
    ensure!(list["researchTasks"]["edges"] == json!([{ "node": { "id": new["id"] } }]), "{list}");
    api.stop().await;
    Ok(())
}

async fn legacy_and_foreign_answer_traces_are_never_returned(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space_id = api.space("alice").await?;
    let space = entity::knowledge_space::Entity::find_by_id(space_id.parse::<Uuid>()?)
        .one(&db.db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("space row missing"))?;
    let alice = entity::member::Entity::find()
        .filter(entity::member::Column::KnowledgeSpaceId.eq(space.id))
        .one(&db.db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("owner row missing"))?;
    let snapshot = kfs_tests::fixtures::snapshot(&db, &alice, entity::AccessChannel::Interactive).await?;
    let owned = answer_trace::Entity::insert(kfs_tests::fixtures::answer_trace_row(&snapshot))
        .exec_with_returning(&db.db)
        .await?;
    let mut legacy = kfs_tests::fixtures::answer_trace_row(&snapshot);
    legacy.id = Set(Uuid::now_v7());
    legacy.subject_id = Set(None);
    legacy.permission_snapshot_id = Set(None);
    legacy.permission_snapshot_revision = Set(None);
    legacy.access_channel = Set(None);
    let legacy = answer_trace::Entity::insert(legacy).exec_with_returning(&db.db).await?;

    let read = "query($id: UUID!) { answerTrace(id: $id) { id accessChannel } }";
    let list = "query($s: UUID!) { answerTraces(knowledgeSpaceId: $s) { edges { node { id } } } }";
    let token = api.token("alice");
    let mine = api.data(Some(&token), read, json!({ "id": owned.id })).await?;
    ensure!(mine["answerTrace"] == json!({ "id": owned.id, "accessChannel": "INTERACTIVE" }), "{mine}");
    // A trace from before citation checks lists its marks, with no verdict and no quote.
    let typed = "query($id: UUID!) { answerTrace(id: $id) { citations { n sentence verdict evidence { title } quote { text } } } }";
    let citations = api.data(Some(&token), typed, json!({ "id": owned.id })).await?;
    let expected =
        json!([{ "n": 1, "sentence": "A time-bounded claim [1].", "verdict": null, "evidence": null, "quote": null }]);
    ensure!(citations["answerTrace"]["citations"] == expected, "{citations}");
    ensure!(api.data(Some(&token), read, json!({ "id": legacy.id })).await?["answerTrace"].is_null());
    let listed = api.data(Some(&token), list, json!({ "s": space.id })).await?;
    ensure!(listed["answerTraces"]["edges"] == json!([{ "node": { "id": owned.id } }]), "{listed}");
    api.member("alice", &space_id, "bob", "OWNER").await?;
    let bob = api.token("bob");
    ensure!(api.data(Some(&bob), read, json!({ "id": owned.id })).await?["answerTrace"].is_null());
    let theirs: Value = api.data(Some(&bob), list, json!({ "s": space.id })).await?;
    ensure!(theirs["answerTraces"]["edges"] == json!([]), "{theirs}");
    api.stop().await;
    Ok(())
}

async fn roles_decide_who_manages_members_keys_and_documents(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "ed", "EDITOR").await?;
    api.member("alice", &space, "vi", "VIEWER").await?;
    let document = "mutation($s: UUID!) { addKnowledgeDocument(input: {knowledgeSpaceId: $s, title: \"t\", content: \"c\"}) { id } }";
    let add = crate::api_support::ADD_MEMBER;
    let add_vars = json!({ "input": { "knowledgeSpaceId": space, "subjectId": "zed", "role": "VIEWER" } });
    let key_vars = json!({ "input": { "knowledgeSpaceId": space, "name": "k" } });
    let members = "query($id: UUID!) { knowledgeSpace(id: $id) { members { subjectId } } }";
    let vars = json!({ "s": space });

    api.data(Some(&api.token("ed")), document, vars.clone()).await?;
    ensure!(api.code(Some(&api.token("vi")), document, vars.clone()).await? == "FORBIDDEN");
    ensure!(api.code(Some(&api.token("stranger")), document, vars).await? == "NOT_FOUND");
    ensure!(api.code(Some(&api.token("ed")), add, add_vars.clone()).await? == "FORBIDDEN");
    ensure!(api.code(Some(&api.token("stranger")), add, add_vars).await? == "NOT_FOUND");
    ensure!(api.code(Some(&api.token("ed")), crate::api_support::CREATE_KEY, key_vars).await? == "FORBIDDEN");
    ensure!(api.code(Some(&api.token("vi")), members, json!({ "id": space })).await? == "FORBIDDEN");
    let listed = api.data(Some(&api.token("alice")), members, json!({ "id": space })).await?;
    ensure!(listed["knowledgeSpace"]["members"].as_array().map(Vec::len) == Some(3), "{listed}");
    // The last owner cannot leave the space ownerless.
    let remove = "mutation($s: UUID!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $s, subjectId: \"alice\") }";
    ensure!(api.code(Some(&api.token("alice")), remove, json!({ "s": space })).await? == "CONFLICT");
    api.stop().await;
    Ok(())
}

/// Three tasks under a grant that died (a role change bumps the membership revision)
/// interleave nothing into the list: pages of two hold only the three live tasks, newest
/// first, and the cursor walks past the dead ones.
async fn pages_skip_tasks_whose_grant_died_and_still_fill_up(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let bob = api.token("bob");
    for _ in 0..3 {
        api.task(&bob, &space).await?;
    }
    api.member("alice", &space, "bob", "EDITOR").await?;
    let mut live = Vec::new();
    for _ in 0..3 {
        live.push(string_at(&api.task(&bob, &space).await?, "/id")?);
    }
    live.reverse();
    let page = "query($s: UUID!, $after: String) { researchTasks(knowledgeSpaceId: $s, first: 2, after: $after) { \
                edges { cursor node { id } } pageInfo { hasNextPage } } }";
    let first = api.data(Some(&bob), page, json!({ "s": space, "after": null })).await?;
    let ids = |data: &Value| -> Vec<String> {
        data["researchTasks"]["edges"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|edge| edge["node"]["id"].as_str().map(str::to_owned))
            .collect()
    };
    ensure!(ids(&first) == live[..2], "first page {first}");
    ensure!(first["researchTasks"]["pageInfo"]["hasNextPage"] == true, "{first}");
    let cursor = first["researchTasks"]["edges"][1]["cursor"].clone();
    let second = api.data(Some(&bob), page, json!({ "s": space, "after": cursor })).await?;
    ensure!(ids(&second) == live[2..], "second page {second}");
    ensure!(second["researchTasks"]["pageInfo"]["hasNextPage"] == false, "{second}");
    api.stop().await;
    Ok(())
}
