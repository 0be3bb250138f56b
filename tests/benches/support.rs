//! The answer support check on the labelled set (`tests/data/support_claims.json`): per kind
//! of claim, how many pairs, the share judged right, and precision and recall (for the
//! paraphrases, of the verdict "supported" over every kind; for the others, of the verdict
//! "unsupported" for that kind against the paraphrases). Printed for the check as it stands
//! (`worker::research::support`) and, as a baseline, for the exact-word rule it replaced
//! (at least half of the claim's lower-cased words, stop words aside, in the passage),
//! and with the stand-in embeddings of the tests crate (hashed words and trigrams) at the
//! default threshold and at lower ones, as the meaning fallback would judge.
//! No database, no server: `cargo bench -p workspace-tests --bench support`.
use std::collections::HashSet;

use kfs_tests::support_eval::{Score, labelled_claims, supported_with_stand_in_embeddings};
use worker::knowledge::search::search_terms;
use worker::research::support::similar::DEFAULT_THRESHOLD;
use worker::research::support::{Reading, check};

fn main() -> anyhow::Result<()> {
    let claims = labelled_claims()?;
    println!("{} labelled pairs\n", claims.len());
    let exact_words = Score::of(&claims, |claim, passage| {
        let words = search_terms(claim);
        let held: HashSet<String> = search_terms(passage).into_iter().collect();
        words.is_empty() || words.iter().filter(|word| held.contains(*word)).count() * 2 >= words.len()
    });
    println!("exact words, half of them (the rule before):\n{}", exact_words.table());
    let support = Score::of(&claims, |claim, passage| check(&Reading::new(claim), &Reading::new(passage)).supported);
    println!("the support check:\n{}", support.table());
    for threshold in [DEFAULT_THRESHOLD, 0.6, 0.5] {
        let embedded =
            Score::of(&claims, |claim, passage| supported_with_stand_in_embeddings(claim, passage, threshold));
        println!("with the stand-in embeddings, similarity at least {threshold}:\n{}", embedded.table());
    }
    let below = support.below_floors();
    println!("below the floors: {}", if below.is_empty() { "none".to_owned() } else { below.join("; ") });
    Ok(())
}
