//! Splitting, by format: structure kept, sizes bounded, and every range pointing back at
//! exactly the part of the content its passage came from.
use super::*;

fn settings(target: usize, overlap: usize) -> ChunkSettings {
    ChunkSettings { target_tokens: target, overlap_tokens: overlap, ..ChunkSettings::default() }
}

/// The passages of `content`, which must stay within the passage limit.
fn chunk(content: &str, media: MediaType, settings: &ChunkSettings) -> Vec<Chunk> {
    super::chunk(content, media, settings).expect("within the passage limit")
}

/// The content a chunk's range selects.
fn slice(content: &str, chunk: &Chunk) -> String {
    content.chars().skip(chunk.char_start).take(chunk.char_end - chunk.char_start).collect()
}

/// Whether every word of the chunk's text appears, in order, in its range of the content.
fn words_in_order(content: &str, chunk: &Chunk) -> bool {
    let source = slice(content, chunk);
    let mut rest = source.as_str();
    chunk.text.split_whitespace().all(|word| match rest.find(word) {
        Some(at) => {
            rest = &rest[at + word.len()..];
            true
        }
        None => false,
    })
}

/// A paragraph of about `tokens` estimated tokens about `topic`.
fn paragraph(topic: &str, tokens: usize) -> String {
    let mut text = format!("{topic} begins here");
    while estimate_tokens(&text) < tokens as i64 {
        text.push_str(" and goes on");
    }
    text.push('.');
    text
}

#[test]
fn plain_text_paragraphs_map_back_exactly() {
    // Each paragraph is too big to merge with the next (2 x 40 > 60), small enough to stay whole.
    let (one, two, three) = (paragraph("First", 40), paragraph("Second", 40), paragraph("Third", 40));
    let two_lines = two.replacen(" and ", "\nand ", 1);
    let content = format!("{one}\n\n{two_lines}\n\n\n  {three}  \n");
    let chunks = chunk(&content, MediaType::TextPlain, &settings(60, 0));
    let texts: Vec<&str> = chunks.iter().map(|chunk| chunk.text.as_str()).collect();
    assert_eq!(texts, [one.as_str(), two.as_str(), three.as_str()]);
    assert_eq!(slice(&content, &chunks[0]), one);
    assert_eq!(slice(&content, &chunks[1]), two_lines);
    assert_eq!(slice(&content, &chunks[2]), three);
    assert_eq!(chunks.iter().map(|chunk| chunk.ordinal).collect::<Vec<_>>(), [0, 1, 2]);
}

#[test]
fn small_paragraphs_merge_up_to_the_target() {
    let content = "One.\n\nTwo.\n\nThree.";
    let chunks = chunk(content, MediaType::TextPlain, &settings(200, 40));
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].text, "One. Two. Three.");
    assert_eq!(slice(content, &chunks[0]), content);
}

#[test]
fn markdown_headings_become_the_heading_path_and_are_not_passages() {
    let content = "# Tides\n\nIntro about the sea.\n\n## Causes\n\nThe **moon** pulls.\n\n- a list item\n- another one\n\n### Detail\n\nDeep text.\n\n## Effects\n\nFloods.\n";
    let chunks = chunk(content, MediaType::TextMarkdown, &settings(200, 0));
    let found: Vec<(Vec<&str>, &str)> = chunks
        .iter()
        .map(|chunk| (chunk.heading_path.iter().map(String::as_str).collect(), chunk.text.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![
            (vec!["Tides"], "Intro about the sea."),
            (vec!["Tides", "Causes"], "The moon pulls. a list item another one"),
            (vec!["Tides", "Causes", "Detail"], "Deep text."),
            (vec!["Tides", "Effects"], "Floods."),
        ]
    );
    for chunk in &chunks {
        assert!(words_in_order(content, chunk), "{chunk:?} in {:?}", slice(content, chunk));
    }
    assert_eq!(slice(content, &chunks[3]), "Floods.");
}

#[test]
fn markdown_code_blocks_and_tables_are_blocks() {
    let content = "Intro.\n\n```rust\nfn main() {}\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n";
    let chunks = chunk(content, MediaType::TextMarkdown, &settings(2_000, 0));
    assert_eq!(chunks.len(), 1);
    assert!(chunks[0].text.contains("fn main() {}") && chunks[0].text.contains("1 | 2"), "{:?}", chunks[0].text);
}

#[test]
fn html_blocks_span_their_markup_and_skip_scripts() {
    let content = "<html><head><title>T</title><style>p { color: red }</style></head><body>\
        <h1>Bees</h1><p>Bees make <b>honey</b> &amp; wax.</p><script>var x = '<p>not text</p>';</script>\
        <ul><li>Workers</li><li>Drones</ul><div>Loose text in a div</div><h2>Hives</h2><p>Boxes</body></html>";
    // Small blocks under one heading merge; the merged range runs from the first block's
    // start tag to the last one's end.
    let chunks = chunk(content, MediaType::TextHtml, &settings(200, 0));
    let texts: Vec<&str> = chunks.iter().map(|chunk| chunk.text.as_str()).collect();
    assert_eq!(texts, ["Bees make honey & wax. Workers Drones Loose text in a div", "Boxes"]);
    let first = slice(content, &chunks[0]);
    assert!(
        first.starts_with("<p>Bees make <b>honey</b> &amp; wax.</p>") && first.ends_with("Loose text in a div"),
        "{first:?}"
    );
    assert_eq!(chunks[0].heading_path, ["Bees"]);
    assert_eq!(chunks[1].heading_path, ["Bees", "Hives"]);
    // Unmerged, each block's range is its own markup.
    let apart = chunk(content, MediaType::TextHtml, &settings(6, 0));
    let ranges: Vec<String> = apart.iter().map(|chunk| slice(content, chunk)).collect();
    assert_eq!(ranges[0], "<p>Bees make <b>honey</b> &amp; wax.</p>");
    assert_eq!(ranges[1], "<li>Workers</li><li>Drones");
    assert_eq!(ranges[2], "Loose text in a div");
    assert!(texts.iter().all(|text| !text.contains("not text") && !text.contains("color")));
}

#[test]
fn a_long_paragraph_is_split_at_sentences_with_overlap_and_exact_ranges() {
    let sentences: Vec<String> = (0..40).map(|n| format!("Sentence number {n} says something about tides.")).collect();
    let content = sentences.join(" ");
    let chunks = chunk(&content, MediaType::TextPlain, &settings(60, 15));
    assert!(chunks.len() > 3, "{}", chunks.len());
    for chunk in &chunks {
        assert!(chunk.tokens <= 60 + 15, "{chunk:?}");
        assert_eq!(slice(&content, chunk).split_whitespace().collect::<Vec<_>>().join(" "), chunk.text);
    }
    // Consecutive windows share their edge sentences, and together cover everything.
    for pair in chunks.windows(2) {
        assert!(pair[1].char_start < pair[0].char_end, "no overlap between {pair:?}");
        assert!(pair[1].char_start > pair[0].char_start);
    }
    assert_eq!(chunks.first().map(|chunk| chunk.char_start), Some(0));
    assert_eq!(chunks.last().map(|chunk| chunk.char_end), Some(content.chars().count()));
}

#[test]
fn a_sentence_longer_than_a_passage_is_cut_between_words() {
    let content = "word ".repeat(2_000);
    let chunks = chunk(&content, MediaType::TextPlain, &settings(50, 0));
    assert!(chunks.len() >= 40, "{}", chunks.len());
    assert!(chunks.iter().all(|chunk| chunk.tokens <= 51 && chunk.text.split(' ').all(|word| word == "word")));
}

#[test]
fn unicode_ranges_count_code_points() {
    let content = "Ünïcödé — 日本語のテキスト。\n\nSecond: café ☕ and emoji 🎉.";
    let chunks = chunk(content, MediaType::TextPlain, &settings(10, 0));
    assert_eq!(chunks.len(), 2);
    assert_eq!(slice(content, &chunks[0]), "Ünïcödé — 日本語のテキスト。");
    assert_eq!(slice(content, &chunks[1]), "Second: café ☕ and emoji 🎉.");
    assert_eq!(chunks[1].char_end, content.chars().count());
}

#[test]
fn empty_and_tiny_documents() {
    for media in [MediaType::TextPlain, MediaType::TextMarkdown, MediaType::TextHtml] {
        assert!(chunk("", media, &ChunkSettings::default()).is_empty());
        assert!(chunk("   \n\n  ", media, &ChunkSettings::default()).is_empty());
        let tiny = chunk("x", media, &ChunkSettings::default());
        assert_eq!(tiny.len(), 1, "{media:?}");
        assert_eq!((tiny[0].text.as_str(), tiny[0].char_start, tiny[0].char_end), ("x", 0, 1));
    }
    assert!(chunk("<div><script>x</script></div>", MediaType::TextHtml, &ChunkSettings::default()).is_empty());
}

#[test]
fn settings_refuse_an_overlap_that_would_not_advance() {
    assert!(settings(100, 60).validated().is_err());
    assert!(settings(8, 0).validated().is_err());
    assert!(ChunkSettings::default().validated().is_ok());
}

#[test]
fn any_input_in_any_format_gives_ordered_ranges_within_the_content() {
    // Fragments that stress each parser: unclosed and stray tags, entities, comments,
    // CDATA, Markdown fences and tables left open, lone surrogates' replacements, NUL-free
    // control characters, right-to-left and combining marks.
    let pieces = [
        "<p>",
        "</p>",
        "<b>",
        "</div>",
        "<!-- c",
        "-->",
        "&amp;",
        "&#x1F600;",
        "&bogus;",
        "<![CDATA[x]]>",
        "<script>",
        "</script>",
        "<li>",
        "# ",
        "## h",
        "```",
        "|a|b|",
        "\n",
        "\n\n",
        "- ",
        "> ",
        "*",
        "_",
        "`",
        "\u{202E}",
        "e\u{301}",
        "東京",
        "\u{FFFD}",
        "\t",
        "word ",
        "Sentence one. ",
        "Two? ",
        "<",
        ">",
        "&",
    ];
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..400 {
        let length = (next() % 200) as usize;
        let content: String = (0..length).map(|_| pieces[(next() % pieces.len() as u64) as usize]).collect();
        let total = content.chars().count();
        for media in [MediaType::TextPlain, MediaType::TextMarkdown, MediaType::TextHtml] {
            let chunks = chunk(&content, media, &settings(16, 4));
            let mut previous_start = 0;
            for (ordinal, piece) in chunks.iter().enumerate() {
                assert_eq!(piece.ordinal as usize, ordinal);
                assert!(
                    piece.char_start <= piece.char_end && piece.char_end <= total,
                    "{media:?} {content:?}: {piece:?}"
                );
                assert!(piece.char_start >= previous_start, "{media:?} {content:?}: passages out of order");
                assert!(!piece.text.is_empty());
                previous_start = piece.char_start;
            }
        }
    }
}

#[test]
fn a_document_past_the_passage_limit_is_refused_naming_it() {
    // Paragraphs of about 150 tokens: two would pass the 200-token target, so one each.
    let limited = ChunkSettings { max_passages: 10, ..settings(200, 0) };
    let content = (0..11).map(|n| paragraph(&format!("Topic{n}"), 150)).collect::<Vec<_>>().join("\n\n");
    let refused = super::chunk(&content, MediaType::TextPlain, &limited).expect_err("over the limit");
    assert_eq!(refused.limit, 10);
    assert!(refused.to_string().contains("KFS_CHUNK_MAX_PASSAGES"), "{refused}");
    let ten = (0..10).map(|n| paragraph(&format!("Topic{n}"), 150)).collect::<Vec<_>>().join("\n\n");
    assert_eq!(super::chunk(&ten, MediaType::TextPlain, &limited).expect("at the limit").len(), 10);
}

#[test]
fn one_letter_paragraphs_pack_into_full_passages() {
    // The shape that cost 60 times its size when every block was held at once.
    let content = "a\n\n".repeat(100_000);
    let chunks = chunk(&content, MediaType::TextPlain, &ChunkSettings::default());
    assert!(chunks.len() < 2_000, "{} passages", chunks.len());
    assert!(chunks.iter().all(|chunk| chunk.tokens <= 200));
    assert_eq!(chunks.last().map(|chunk| chunk.char_end), Some(content.chars().count() - 2));
}

#[test]
fn a_huge_heading_is_cut_before_it_is_copied_into_every_passage() {
    for (content, media) in [
        (format!("# {}\n\nbody one\n\nbody two\n", "word ".repeat(100_000)), MediaType::TextMarkdown),
        (format!("<h1>{}</h1><p>body one</p><p>body two</p>", "word ".repeat(100_000)), MediaType::TextHtml),
    ] {
        let chunks = chunk(&content, media, &ChunkSettings::default());
        let path = &chunks.last().expect("a passage").heading_path;
        assert!(path[0].chars().count() <= 200, "{media:?}: a heading of {} chars", path[0].chars().count());
    }
}

/// Checks every word of every passage through the passage's offset map: the content range
/// it maps to holds the word (exactly, where the word was copied from the source).
fn words_map_back(content: &str, chunks: &[Chunk]) {
    let chars: Vec<char> = content.chars().collect();
    for chunk in chunks {
        let text: Vec<char> = chunk.text.chars().collect();
        let mut at = 0;
        while at < text.len() {
            if text[at].is_whitespace() {
                at += 1;
                continue;
            }
            let end = (at..text.len()).find(|&index| text[index].is_whitespace()).unwrap_or(text.len());
            let word: String = text[at..end].iter().collect();
            let (start, stop) = chunk.source_map.content_range(at, end).expect("a word maps");
            let (start, stop) = (chunk.char_start + start, chunk.char_start + stop);
            assert!(start >= chunk.char_start && stop <= chunk.char_end, "{word:?} maps outside its passage");
            let found: String = chars[start..stop].iter().collect();
            let plain = word.chars().all(|ch| ch.is_alphanumeric());
            if plain {
                assert!(found.contains(&word), "{word:?} maps to {found:?}");
            }
            assert!(found.chars().count() < word.chars().count() + 80, "{word:?} maps to all of {found:?}");
            at = end;
        }
    }
}

#[test]
fn every_word_of_every_format_maps_back_to_its_place_in_the_content() {
    let plain = "Tides   follow\nthe moon.\n\nSpring tides are   high.\n\n".repeat(3) + &paragraph("long", 600);
    words_map_back(&plain, &chunk(&plain, MediaType::TextPlain, &settings(40, 10)));
    let markdown =
        "# Streams\n\nThe *default* `highWaterMark` is **16384** bytes, see [the docs](https://x.test/a).\n\n\
                    - one item\n- two &amp; three\n\n| a | b |\n|---|---|\n| x | y |\n\n<!--note--> Stability: 2\n\n"
            .repeat(4)
            + &paragraph("windowed", 500);
    words_map_back(&markdown, &chunk(&markdown, MediaType::TextMarkdown, &settings(40, 10)));
    let html = "<html><body><h1>Título</h1><p>Bees <b>make</b> honey &amp; wax from nectar.</p>\
                <ul><li>one</li><li>two</li></ul><p>Ünïcode wörds here.</p></body></html>"
        .repeat(5);
    words_map_back(&html, &chunk(&html, MediaType::TextHtml, &settings(30, 5)));
}

#[test]
fn a_copied_sentence_maps_to_exactly_its_words() {
    let content = "# Head\n\nFirst   sentence here.\nSecond sentence *there*.";
    let chunks = chunk(content, MediaType::TextMarkdown, &settings(200, 10));
    let passage = &chunks[0];
    let text = &passage.text;
    let start = text.find("Second").expect("present");
    let end = text.find("there").expect("present") + "there".len();
    let (from, to) = passage.source_map.content_range(start, end).expect("maps");
    let found: String = content.chars().skip(passage.char_start + from).take(to - from).collect();
    assert_eq!(found, "Second sentence *there");
}
