//! The answer support check (`worker::research::support`) against the labelled set
//! (`tests/data/support_claims.json`, `kfs_tests::support_eval`): every kind at or above
//! its documented floor. The bench (`cargo bench -p workspace-tests --bench support`)
//! prints the figures.
use anyhow::ensure;
use kfs_tests::support_eval::{ClaimKind, Score, labelled_claims, supported_with_stand_in_embeddings};
use kfs_tests::{PlainTest, plain_tests};
use worker::research::support::{Reading, check};

pub fn tests() -> Vec<PlainTest> {
    plain_tests![
        the_labelled_claims_are_judged_above_every_floor,
        the_meaning_fallback_keeps_every_floor_with_the_stand_in_embeddings
    ]
}

/// With an embeddings endpoint (the stand-in's vectors) at the default threshold, meaning
/// may support more paraphrases but never lets a changed number, identifier, denial or an
/// unrelated passage through.
async fn the_meaning_fallback_keeps_every_floor_with_the_stand_in_embeddings() -> anyhow::Result<()> {
    let claims = labelled_claims()?;
    let score = Score::of(&claims, |claim, passage| {
        supported_with_stand_in_embeddings(claim, passage, worker::research::support::similar::DEFAULT_THRESHOLD)
    });
    let below = score.below_floors();
    ensure!(below.is_empty(), "below the floors with embeddings: {}\n{}", below.join("; "), score.table());
    Ok(())
}

async fn the_labelled_claims_are_judged_above_every_floor() -> anyhow::Result<()> {
    let claims = labelled_claims()?;
    ensure!(claims.len() >= 150, "the labelled set holds {} pairs, fewer than 150", claims.len());
    for kind in [
        ClaimKind::Paraphrase,
        ClaimKind::ChangedNumber,
        ClaimKind::ChangedIdentifier,
        ClaimKind::Negated,
        ClaimKind::Unrelated,
    ] {
        ensure!(claims.iter().any(|claim| claim.kind == kind), "the labelled set has no {kind:?} claim");
    }
    let score = Score::of(&claims, |claim, passage| check(&Reading::new(claim), &Reading::new(passage)).supported);
    let below = score.below_floors();
    let misjudged: Vec<String> = claims
        .iter()
        .filter_map(|claim| {
            let support = check(&Reading::new(&claim.claim), &Reading::new(&claim.passage));
            (support.supported != claim.kind.supported() && claim.kind != ClaimKind::Swapped)
                .then(|| format!("{:?} {:?} ({:.2}): {}", claim.kind, support.refusal, support.share, claim.claim))
        })
        .collect();
    ensure!(
        below.is_empty(),
        "below the floors: {}\n{}misjudged:\n{}",
        below.join("; "),
        score.table(),
        misjudged.join("\n")
    );
    Ok(())
}
