//! Generation with the `openai` engine: the model's answer, repaired once when it has no
//! prose or no citation, checked sentence by sentence against the evidence (`grounding`),
//! optionally verified claim by claim by the model (`limits.verify`), and replaced by the
//! extractive answer when nothing supported remains. Repair and verification calls are
//! optional: each is made only when it fits in what is left of the budget and before the
//! deadline, and a skip is recorded.
use std::collections::HashSet;
use std::time::Instant;

use entity::ResearchMode;
use serde_json::{Value, json};

use super::{Call, ChatRequest, OpenAiEngine, prompts};
use crate::research::answer::Composed;
use crate::research::engine::{Answer, Composer, CostReport, EngineError, Passage, StageContext, limits_of};
use crate::research::grounding::{self, Aids, Check, Grounded, Verdict, Vetoes};

/// The most claims one answer's verification asks about.
const MAX_VERIFICATIONS: usize = 16;
/// What a verdict may write: a yes or a no, and room for a weak model's first words.
const VERDICT_MAX_TOKENS: u32 = 8;

/// What became of an optional call.
enum Optional<T> {
    Made(T),
    Skipped(&'static str),
    Failed(String),
}

impl OpenAiEngine {
    /// The answer over `evidence` (not empty), what generation reports about it, and what
    /// it spent besides model calls (a rerank request choosing its lead sentence).
    pub(super) async fn grounded_answer(
        &self,
        ctx: &StageContext<'_>,
        evidence: &[Passage],
    ) -> Result<(Answer, Value, CostReport), EngineError> {
        let model = self.model_for(ctx);
        let question = ctx.question();
        let mut composer = Composer::new(ctx.answer, evidence.len());
        let started = Instant::now();
        let request = ChatRequest {
            model: model.clone(),
            messages: prompts::answer_messages(question, evidence, &ctx.model_guidance()),
            json: false,
            max_tokens: None,
        };
        let output = self.call(ctx, Call { stage: "generating", request, composer: Some(&mut composer) }).await?;
        // How long a call like this takes: what an optional call is expected to need.
        let expected_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let mut composed = composer.finish();
        let mut report = json!({ "model": model, "finish_reason": output.finish_reason });
        if !composed.removed.is_empty() {
            report["removed_citations"] = json!(composed.removed);
        }
        if let Some(problem) = needs_repair(&composed) {
            let repaired = self.repair(ctx, &model, evidence, &composed.text, problem, expected_ms).await;
            report["repair"] = match repaired {
                Optional::Made(better) => {
                    let fixed = needs_repair(&better).is_none();
                    composed = better;
                    json!({ "problem": problem, "outcome": if fixed { "repaired" } else { "still_wrong" } })
                }
                Optional::Skipped(reason) => json!({ "problem": problem, "outcome": "skipped", "reason": reason }),
                Optional::Failed(error) => json!({ "problem": problem, "outcome": "failed", "error": error }),
            };
        }
        // Only what the evidence supports reaches the trace; an answer that changed arrives
        // on `researchTaskAnswer` as a reset when the completion commits.
        let readable: Vec<String> = evidence.iter().map(Passage::readable_text).collect();
        let texts: Vec<&str> = readable.iter().map(String::as_str).collect();
        let labels: Vec<String> = evidence.iter().flat_map(Passage::labels).collect();
        let sources = grounding::Sources { texts: &texts, labels: &labels, question };
        // Checked as the model wrote it (its `[n]` naming the n-th item), so every verdict
        // holds the sentence and number it wrote, and a number naming no evidence is a
        // removed citation.
        let as_numbered: Vec<usize> = (0..evidence.len()).collect();
        // With an embeddings endpoint, a sentence in other words may pass by meaning.
        let (similar, meaning) =
            crate::research::meaning::similarities(&composed.written, &sources, &as_numbered, ctx.passages).await;
        if !meaning.is_null() {
            report["similarity"] = meaning;
        }
        // With a reranker, it chooses the evidence sentence the answer must hold.
        let lead =
            crate::research::lead::lead_sentence(self.builtin.reranker(), question, &readable, ctx.spend()).await;
        if !lead.report.is_null() {
            report["lead"] = lead.report;
        }
        let mut aids = Aids { similar, lead: lead.sentence.clone(), ..Aids::default() };
        let mut grounded = grounding::ground_with(&composed.written, &sources, &as_numbered, &aids);
        let verify = limits_of(ctx.job).verify.unwrap_or(Self::mode(ctx) == ResearchMode::Deep);
        if verify && let Some(first) = &grounded {
            let (vetoes, record) = self.verify(ctx, &model, first, &texts, expected_ms).await;
            report["verification"] = record;
            if !vetoes.is_empty() {
                aids.vetoes = vetoes;
                grounded = grounding::ground_with(&composed.written, &sources, &as_numbered, &aids);
            }
        }
        let (answer, checks) = match grounded {
            // Passed whole: the text as shown while it streamed (renumbered in order of
            // first citation, as the check numbers it too).
            Some(grounded) if grounded.text == composed.written.trim() => {
                let grounded = grounded.restated(&composed.text);
                let answer = Answer::checked(composed.text.clone(), evidence, &composed.cited, &grounded.sentences);
                (answer, grounded.checks)
            }
            Some(Grounded { text, cited, checks, sentences, .. }) => {
                (Answer::checked(text, evidence, &cited, &sentences), checks)
            }
            None => {
                let mut extracted = crate::research::engine::grounded_extractive(
                    &ctx.question_with_notes(),
                    evidence,
                    lead.sentence.clone(),
                );
                for citation in &mut extracted.answer.citations {
                    citation.verdict = Verdict::ExtractiveFallback;
                }
                let check = Check {
                    sentence: composed.written.clone(),
                    citation: None,
                    written_citation: None,
                    verdict: Verdict::ExtractiveFallback,
                };
                (extracted.answer, vec![check])
            }
        };
        report["citation_checks"] = json!(checks);
        Ok((answer, report, lead.cost))
    }

    /// One more generation that says what was wrong, streamed as a reset.
    async fn repair(
        &self,
        ctx: &StageContext<'_>,
        model: &str,
        evidence: &[Passage],
        previous: &str,
        problem: &str,
        expected_ms: i64,
    ) -> Optional<Composed> {
        if !fits_deadline(ctx, expected_ms) {
            return Optional::Skipped("deadline");
        }
        let messages = prompts::repair_messages(ctx.question(), evidence, &ctx.model_guidance(), previous, problem);
        let request = ChatRequest { model: model.to_owned(), messages, json: false, max_tokens: None };
        let mut composer = Composer::new(ctx.answer, evidence.len());
        composer.restart();
        match self.call(ctx, Call { stage: "generating", request, composer: Some(&mut composer) }).await {
            Ok(_) => Optional::Made(composer.finish()),
            Err(EngineError::OverBudget(_)) => Optional::Skipped("budget"),
            Err(error) => Optional::Failed(error.to_string()),
        }
    }

    /// Asks the model, per cited claim, whether the passage supports it; returns the
    /// pairs it refuted and the record (`asked`, `refuted`, `unclear`, and why it stopped
    /// early when it did).
    async fn verify(
        &self,
        ctx: &StageContext<'_>,
        model: &str,
        grounded: &Grounded,
        texts: &[&str],
        expected_ms: i64,
    ) -> (Vetoes, Value) {
        let mut vetoes = HashSet::new();
        let (mut asked, mut unclear) = (0, 0);
        let mut stopped: Option<Value> = None;
        let mut pairs: Vec<(&String, usize)> = Vec::new();
        for (claim, indexes) in &grounded.claims {
            pairs.extend(indexes.iter().map(|&index| (claim, index)));
        }
        pairs.truncate(MAX_VERIFICATIONS);
        for (claim, index) in pairs {
            if !fits_deadline(ctx, expected_ms) {
                stopped = Some(json!("deadline"));
                break;
            }
            let passage = texts.get(index).copied().unwrap_or_default();
            let request = ChatRequest {
                model: model.to_owned(),
                messages: prompts::verify_messages(claim, passage),
                json: false,
                max_tokens: Some(VERDICT_MAX_TOKENS),
            };
            match self.call(ctx, Call { stage: "generating", request, composer: None }).await {
                Ok(output) => {
                    asked += 1;
                    match prompts::parse_verdict(&output.content) {
                        Some(true) => {}
                        Some(false) => {
                            vetoes.insert((claim.clone(), index));
                        }
                        None => unclear += 1,
                    }
                }
                Err(EngineError::OverBudget(_)) => {
                    stopped = Some(json!("budget"));
                    break;
                }
                Err(error) => {
                    stopped = Some(json!(format!("failed: {error}")));
                    break;
                }
            }
        }
        let mut record = json!({ "asked": asked, "refuted": vetoes.len(), "unclear": unclear });
        if let Some(reason) = stopped {
            record["skipped"] = reason;
        }
        (vetoes, record)
    }
}

/// Whether another call expected to take `expected_ms` ends before `limits.deadline_ms`.
fn fits_deadline(ctx: &StageContext<'_>, expected_ms: i64) -> bool {
    match limits_of(ctx.job).deadline_ms {
        Some(ms) => entity::now_millis().saturating_add(expected_ms) <= ctx.job.created_at.saturating_add(ms.get()),
        None => true,
    }
}

/// What is wrong with an answer that needs a repair: no prose (only citation marks,
/// whitespace, or one claim repeated), or no citation at all.
fn needs_repair(composed: &Composed) -> Option<&'static str> {
    let claims: Vec<Vec<String>> = grounding::sentences(&composed.text)
        .iter()
        .map(grounding::Sentence::content_words)
        .filter(|words| !words.is_empty())
        .collect();
    let distinct: HashSet<&Vec<String>> = claims.iter().collect();
    if claims.is_empty() {
        return Some("holds no prose, only citation marks or nothing");
    }
    if claims.len() >= 3 && distinct.len() * 2 <= claims.len() {
        return Some("repeats itself");
    }
    if composed.cited.is_empty() {
        return Some("cites no evidence");
    }
    None
}
