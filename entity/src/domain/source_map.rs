//! Where each character of a passage's stored text came from in its document's content,
//! recorded by the splitter so that a quote taken from the passage maps back to the exact
//! words of the document. The splitter drops markup, decodes entities and collapses
//! whitespace, so the passage's text is not a slice of the content; the map says, run by
//! run, which part of the content each part of the text stands for.
//!
//! A run starts at a text offset and covers the text up to the next run's start. It
//! stands for a range of the content, relative to the passage's `char_start`: a *linear*
//! run (characters copied from the content one for one) maps character by character; any
//! other run (a decoded entity, a space the splitter put between blocks) maps as a whole.
//! All offsets are Unicode code points.
//!
//! A map holds at most [`MAX_RUNS`] runs, so its size is bounded by a constant per passage
//! whatever the document's shape (a megabyte of one-letter paragraphs would otherwise need
//! a run per letter): past that, neighbouring runs merge pairwise into runs that map as a
//! whole, so a quote's range still holds its words and is only less tight.

/// The most runs a map keeps.
pub const MAX_RUNS: usize = 64;

/// The offset map of one passage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceMap {
    /// `(text start, content start, content end, linear)`, by text start.
    runs: Vec<(u32, u32, u32, bool)>,
    /// The text's length.
    text_len: u32,
}

impl SourceMap {
    /// A map built character by character: for each character of the text in order, the
    /// content range it came from (relative to the passage's start), or `None` for one
    /// the splitter added (it stands for an empty range after the one before it).
    pub fn from_chars(chars: impl IntoIterator<Item = Option<(u32, u32)>>) -> Self {
        let mut runs: Vec<(u32, u32, u32, bool)> = Vec::new();
        let mut text_len = 0u32;
        let mut last_end = 0u32;
        for (at, range) in chars.into_iter().enumerate() {
            let at = u32::try_from(at).unwrap_or(u32::MAX);
            text_len = at.saturating_add(1);
            let (start, end) = range.unwrap_or((last_end, last_end));
            let end = end.max(start);
            last_end = end;
            if let Some(run) = runs.last_mut() {
                if run.3 && start == run.2 && end == start + 1 {
                    run.2 = end;
                    continue;
                }
                if !run.3 && start == run.1 && end == run.2 {
                    continue;
                }
            }
            runs.push((at, start, end, end == start + 1));
        }
        while runs.len() > MAX_RUNS {
            runs = runs
                .chunks(2)
                .map(|pair| {
                    let start = pair.iter().map(|run| run.1).min().unwrap_or(0);
                    let end = pair.iter().map(|run| run.2).max().unwrap_or(0);
                    (pair[0].0, start, end, false)
                })
                .collect();
        }
        Self { runs, text_len }
    }

    /// The smallest content range (relative to the passage's start, half-open) holding the
    /// text's characters `start..end`, or `None` for an empty or out-of-range request.
    pub fn content_range(&self, start: usize, end: usize) -> Option<(usize, usize)> {
        let (start, end) = (u32::try_from(start).ok()?, u32::try_from(end).ok()?);
        if start >= end || end > self.text_len {
            return None;
        }
        let first = self.run_at(start)?;
        let last = self.run_at(end - 1)?;
        let from = self.position(first, start, false);
        let to = self.position(last, end - 1, true);
        Some((from as usize, (to.max(from)) as usize))
    }

    /// The index of the run holding text offset `at`.
    fn run_at(&self, at: u32) -> Option<usize> {
        self.runs.partition_point(|run| run.0 <= at).checked_sub(1)
    }

    /// Where text offset `at` of run `index` starts (or, with `after`, ends) in the content.
    fn position(&self, index: usize, at: u32, after: bool) -> u32 {
        let (text_start, start, end, linear) = self.runs[index];
        if linear {
            // A stored map is read back from the database: no arithmetic may overflow.
            start.saturating_add(at - text_start).saturating_add(u32::from(after))
        } else if after {
            end
        } else {
            start
        }
    }

    /// The map as stored: a JSON array of its text length, then each run's text start,
    /// content start, content end and 1 for linear (0 for whole).
    pub fn encode(&self) -> String {
        let mut numbers = Vec::with_capacity(1 + self.runs.len() * 4);
        numbers.push(self.text_len);
        for run in &self.runs {
            numbers.extend([run.0, run.1, run.2, u32::from(run.3)]);
        }
        serde_json::to_string(&numbers).unwrap_or_default()
    }

    /// A stored map, or `None` when it is not one.
    pub fn decode(stored: &str) -> Option<Self> {
        let numbers: Vec<u32> = serde_json::from_str(stored).ok()?;
        let (&text_len, rest) = numbers.split_first()?;
        if rest.len() % 4 != 0 {
            return None;
        }
        let runs: Vec<(u32, u32, u32, bool)> =
            rest.chunks_exact(4).map(|run| (run[0], run[1], run[2], run[3] == 1)).collect();
        let ordered = runs.windows(2).all(|pair| pair[0].0 < pair[1].0)
            && runs.iter().all(|run| run.1 <= run.2 && run.0 < text_len.max(1));
        ordered.then_some(Self { runs, text_len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_runs_map_characters_and_others_map_whole() {
        // "a&b c": `a` at 0, `&` from "&amp;" (1..6), `b` at 6, an added space, `c` at 9.
        let map = SourceMap::from_chars([Some((0, 1)), Some((1, 6)), Some((6, 7)), None, Some((9, 10))]);
        assert_eq!(map.content_range(0, 1), Some((0, 1)));
        assert_eq!(map.content_range(1, 2), Some((1, 6)));
        assert_eq!(map.content_range(0, 3), Some((0, 7)));
        assert_eq!(map.content_range(4, 5), Some((9, 10)));
        assert_eq!(map.content_range(2, 5), Some((6, 10)));
        assert_eq!(map.content_range(3, 3), None);
        assert_eq!(map.content_range(4, 6), None);
        let stored = map.encode();
        assert_eq!(SourceMap::decode(&stored), Some(map));
        assert_eq!(SourceMap::decode("[3, 1, 0, 1]"), None);
        assert_eq!(SourceMap::decode("nonsense"), None);
    }

    #[test]
    fn a_map_past_its_runs_merges_them_and_still_holds_every_character() {
        // One-letter paragraphs: a letter every three characters, a space between.
        let chars = (0..1_000u32).map(|at| if at % 2 == 0 { Some((at / 2 * 3, at / 2 * 3 + 1)) } else { None });
        let map = SourceMap::from_chars(chars);
        assert!(map.runs.len() <= MAX_RUNS, "{}", map.runs.len());
        for at in (0..1_000).step_by(2) {
            let (start, end) = map.content_range(at, at + 1).expect("maps");
            let letter = at / 2 * 3;
            assert!(start <= letter && letter < end, "{at}: {start}..{end}");
        }
    }

    #[test]
    fn a_copied_text_is_one_run() {
        let map = SourceMap::from_chars((0..100).map(|at| Some((at + 5, at + 6))));
        assert_eq!(map.runs.len(), 1);
        assert_eq!(map.content_range(10, 20), Some((15, 25)));
    }
}
