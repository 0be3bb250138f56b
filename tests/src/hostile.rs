//! Documents built to make a GraphQL server's parser or validator recurse or fan out,
//! shared by the hardening tests and the `hostile` bench: fragment chains the operation
//! never uses, fragment fan-out, deep selections, deep literals and variables, too many
//! tokens or fragments.

/// A hostile document: what it is, its text and its variables as JSON text (written by
/// hand: a value nested 100,000 deep cannot even be dropped without recursing).
pub struct Hostile {
    /// What it is, for messages.
    pub what: String,
    /// The document.
    pub query: String,
    /// Its variables as JSON text.
    pub variables: String,
}

fn hostile(what: &str, query: String) -> Hostile {
    Hostile { what: what.to_owned(), query, variables: "{}".to_owned() }
}

/// `query{__typename}` followed by a chain of `n` fragments the operation never uses.
pub fn unused_fragment_chain(n: usize) -> String {
    let mut text = String::from("query{__typename}");
    for index in 0..n {
        text.push_str(&format!(" fragment F{index} on Query{{...F{}}}", index + 1));
    }
    text.push_str(&format!(" fragment F{n} on Query{{__typename}}"));
    text
}

/// An operation spreading F0, where each fragment spreads the next twice: 2^n selections.
pub fn fragment_fan_out(n: usize) -> String {
    let mut text = String::from("query{...F0}");
    for index in 0..n {
        text.push_str(&format!(" fragment F{index} on Query{{...F{next} ...F{next}}}", next = index + 1));
    }
    text.push_str(&format!(" fragment F{n} on Query{{__typename}}"));
    text
}

/// Every hostile document, each sized to fit a `budget`-byte message. Variables nest as
/// deep as `variable_depth`.
pub fn documents(budget: usize, variable_depth: usize) -> Vec<Hostile> {
    let chain = (budget - 2_000) / 40;
    let depth = (budget - 200) / 10;
    let space = uuid::Uuid::nil();
    vec![
        hostile("an unused fragment chain", unused_fragment_chain(chain)),
        hostile("a short unused fragment chain", unused_fragment_chain(40)),
        hostile("fragment fan-out", fragment_fan_out(30)),
        hostile("unused fragment fan-out", fragment_fan_out(30).replacen("query{...F0}", "query{__typename}", 1)),
        hostile("a fragment cycle", "query{...A} fragment A on Query{...B} fragment B on Query{...A}".to_owned()),
        hostile("deep selections", format!("query{}{}", "{viewer".repeat(depth), "}".repeat(depth + 1))),
        hostile("deep selections through fragments", deep_through_fragments()),
        hostile(
            "a deep input literal",
            format!("mutation{{createResearchTask(input:{{knowledgeSpaceId:\"{space}\",query:\"q\",limits:{}1{}}}){{id}}}}", "{a:".repeat(depth / 2), "}".repeat(depth / 2)),
        ),
        hostile("a deep list literal", format!("query{{researchTasks(knowledgeSpaceId:\"{space}\",stages:{}QUEUED{}){{edges{{cursor}}}}}}", "[".repeat(depth), "]".repeat(depth))),
        Hostile {
            what: "a deep list variable".to_owned(),
            query: "query($s:[ResearchStage!]){viewer{subjectId}}".to_owned(),
            variables: format!("{{\"s\":{}\"QUEUED\"{}}}", "[".repeat(variable_depth), "]".repeat(variable_depth)),
        },
        Hostile {
            what: "a deep object variable".to_owned(),
            query: "mutation($l:JSON){createResearchTask(input:{knowledgeSpaceId:\"00000000-0000-0000-0000-000000000000\",query:\"q\",limits:$l}){id}}".to_owned(),
            variables: format!("{{\"l\":{}1{}}}", "{\"a\":".repeat(variable_depth), "}".repeat(variable_depth)),
        },
        hostile("too many tokens", format!("query{{{}}}", "x ".repeat((budget - 100) / 2))),
        hostile("too many fragments", many_fragments((budget - 100) / 40)),
        hostile(
            "many expensive aliases",
            format!("query{{{}}}", (0..(budget - 100) / 44).map(|i| format!("a{i}:knowledgeSpaces{{edges{{node{{id}}}}}} ")).collect::<String>()),
        ),
    ]
}

/// Fragments each nesting a few levels and spreading the next: shallow one by one, deep
/// once spreads are followed.
fn deep_through_fragments() -> String {
    let mut text = String::from("query{...F0}");
    for index in 0..40 {
        text.push_str(&format!(
            " fragment F{index} on Query{{knowledgeSpaces{{edges{{node{{id}}}}}} ...F{}}}",
            index + 1
        ));
    }
    text.push_str(" fragment F40 on Query{__typename}");
    text
}

fn many_fragments(n: usize) -> String {
    let mut text = String::from("query{__typename}");
    for index in 0..n {
        text.push_str(&format!(" fragment G{index} on Query{{__typename}}"));
    }
    text
}
