//! The labelled set of the answer support check (`tests/data/support_claims.json`): claims
//! written by hand against passages quoted from the retrieval corpus, each labelled with
//! what it is (a faithful paraphrase, which must be supported; a near-copy with one number,
//! version or identifier changed, negated, or with two entities swapped, which must not;
//! and every paraphrase paired with another document's passage, unrelated, which must not),
//! and the score of a check on it.
use std::collections::BTreeMap;

use serde::Deserialize;

/// What a labelled claim is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimKind {
    /// A faithful paraphrase: supported.
    Paraphrase,
    /// One number changed: unsupported.
    ChangedNumber,
    /// One version changed: unsupported.
    ChangedVersion,
    /// One identifier changed: unsupported.
    ChangedIdentifier,
    /// Negated: unsupported.
    Negated,
    /// Two entities swapped: unsupported (reported; the check does not promise it).
    Swapped,
    /// A paraphrase against another document's passage: unsupported.
    Unrelated,
}

impl ClaimKind {
    /// Whether a claim of this kind is supported by its passage.
    pub fn supported(self) -> bool {
        self == Self::Paraphrase
    }

    /// The least share of this kind's claims the check must judge right, if there is a
    /// floor: paraphrase kept 90 %; changed numbers, versions, identifiers and negations
    /// removed 95 %; unrelated removed 100 %; swapped entities none.
    pub fn floor(self) -> Option<f64> {
        match self {
            Self::Paraphrase => Some(0.90),
            Self::ChangedNumber | Self::ChangedVersion | Self::ChangedIdentifier | Self::Negated => Some(0.95),
            Self::Unrelated => Some(1.0),
            Self::Swapped => None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct File {
    facts: Vec<Fact>,
}

#[derive(Debug, Deserialize)]
struct Fact {
    doc: String,
    passage: String,
    paraphrase: String,
    variants: Vec<Variant>,
}

#[derive(Debug, Deserialize)]
struct Variant {
    kind: ClaimKind,
    claim: String,
}

/// One labelled pair.
#[derive(Debug, Clone)]
pub struct LabelledClaim {
    /// What it is.
    pub kind: ClaimKind,
    /// The claim.
    pub claim: String,
    /// The passage it is checked against.
    pub passage: String,
}

/// The labelled set, the unrelated pairs included: each paraphrase against the passage of
/// the next fact from another document.
pub fn labelled_claims() -> anyhow::Result<Vec<LabelledClaim>> {
    let text = include_str!("../data/support_claims.json");
    let file: File = serde_json::from_str(text)?;
    let mut claims = Vec::new();
    for (index, fact) in file.facts.iter().enumerate() {
        claims.push(LabelledClaim {
            kind: ClaimKind::Paraphrase,
            claim: fact.paraphrase.clone(),
            passage: fact.passage.clone(),
        });
        for variant in &fact.variants {
            claims.push(LabelledClaim {
                kind: variant.kind,
                claim: variant.claim.clone(),
                passage: fact.passage.clone(),
            });
        }
        let other = (1..file.facts.len())
            .map(|step| &file.facts[(index + step) % file.facts.len()])
            .find(|other| other.doc != fact.doc)
            .ok_or_else(|| anyhow::anyhow!("the set needs facts of two documents"))?;
        claims.push(LabelledClaim {
            kind: ClaimKind::Unrelated,
            claim: fact.paraphrase.clone(),
            passage: other.passage.clone(),
        });
    }
    Ok(claims)
}

/// The support check with the stand-in embeddings (`embedding_server::embed_text`) at
/// `threshold`, as an answer's check runs it: once to learn which texts it would compare,
/// then with their vectors.
pub fn supported_with_stand_in_embeddings(claim: &str, passage: &str, threshold: f64) -> bool {
    use worker::research::support::similar::Similarities;
    use worker::research::support::{Reading, check_with};
    let (claim, passage) = (Reading::new(claim), Reading::new(passage));
    let asking = Similarities::at(threshold);
    let _ = check_with(&claim, &passage, &asking);
    let mut known = Similarities::at(threshold);
    for text in asking.wanted() {
        let vector = crate::embedding_server::embed_text(&text);
        known.insert(text, vector);
    }
    check_with(&claim, &passage, &known).supported
}

/// How a check did on one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KindScore {
    /// Claims of the kind.
    pub total: usize,
    /// Claims the check judged supported.
    pub judged_supported: usize,
}

impl KindScore {
    /// The share judged right (kept for a supported kind, removed for the others).
    pub fn right(&self, kind: ClaimKind) -> f64 {
        let right = if kind.supported() { self.judged_supported } else { self.total - self.judged_supported };
        if self.total == 0 { 1.0 } else { right as f64 / self.total as f64 }
    }
}

/// A check's score on the labelled set, per kind.
#[derive(Debug, Clone, Default)]
pub struct Score {
    /// Per kind.
    pub kinds: BTreeMap<ClaimKind, KindScore>,
}

impl Score {
    /// Scores `supports` (claim, passage → supported) on `claims`.
    pub fn of(claims: &[LabelledClaim], mut supports: impl FnMut(&str, &str) -> bool) -> Self {
        let mut score = Self::default();
        for claim in claims {
            let kind = score.kinds.entry(claim.kind).or_default();
            kind.total += 1;
            kind.judged_supported += usize::from(supports(&claim.claim, &claim.passage));
        }
        score
    }

    /// Precision and recall of the verdict "supported" over every kind.
    pub fn supported_precision_recall(&self) -> (f64, f64) {
        let (mut right, mut judged, mut truly) = (0, 0, 0);
        for (kind, score) in &self.kinds {
            judged += score.judged_supported;
            if kind.supported() {
                right += score.judged_supported;
                truly += score.total;
            }
        }
        let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
        (ratio(right, judged), ratio(right, truly))
    }

    /// Precision and recall of the verdict "unsupported" for one unsupported kind against
    /// the paraphrases (what it removes of that kind, and what share of all it removes from
    /// the kind and the paraphrases is of that kind).
    pub fn removal_precision_recall(&self, kind: ClaimKind) -> (f64, f64) {
        let of_kind = self.kinds.get(&kind).copied().unwrap_or_default();
        let paraphrase = self.kinds.get(&ClaimKind::Paraphrase).copied().unwrap_or_default();
        let removed = of_kind.total - of_kind.judged_supported;
        let wrongly = paraphrase.total - paraphrase.judged_supported;
        let precision = if removed + wrongly == 0 { 1.0 } else { removed as f64 / (removed + wrongly) as f64 };
        (precision, of_kind.right(kind))
    }

    /// The kinds below their floor, as "kind: right % < floor %".
    pub fn below_floors(&self) -> Vec<String> {
        self.kinds
            .iter()
            .filter_map(|(kind, score)| {
                let floor = kind.floor()?;
                let right = score.right(*kind);
                (right + 1e-9 < floor).then(|| format!("{kind:?}: {:.1} % < {:.0} %", right * 100.0, floor * 100.0))
            })
            .collect()
    }

    /// The table the bench prints.
    pub fn table(&self) -> String {
        let mut out = String::from("kind                 pairs  judged right  precision  recall\n");
        for (kind, score) in &self.kinds {
            let (precision, recall) =
                if kind.supported() { self.supported_precision_recall() } else { self.removal_precision_recall(*kind) };
            out.push_str(&format!(
                "{:<20} {:>5}  {:>11.1} %  {:>8.1} %  {:>5.1} %\n",
                format!("{kind:?}"),
                score.total,
                score.right(*kind) * 100.0,
                precision * 100.0,
                recall * 100.0
            ));
        }
        out
    }
}
