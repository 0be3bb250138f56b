//! How many values a JSON text holds, counted before it is parsed. Parsing builds a tree
//! with an allocation per value, so a body of a few megabytes made of tiny values
//! (`{"v0":[],"v1":[],…}`) costs far more than one of the same size holding a document's
//! text; counting the structural characters outside strings is one pass over the bytes.

/// The most values a request body may hold: far more than any real request's variables
/// (a document's content is one value however long it is).
pub const MAX_JSON_VALUES: usize = 100_000;

/// Whether `bytes` holds at most `max` JSON values, counting each `,` `[` `{` outside
/// strings (so an upper bound on the values minus one per container; a malformed text is
/// left for the parser to refuse).
pub fn within(bytes: &[u8], max: usize) -> bool {
    let (mut count, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in bytes {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b',' | b'[' | b'{' => {
                count += 1;
                if count > max {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_counts_and_string_contents_do_not() {
        assert!(within(br#"{"a":[1,2,3]}"#, 4));
        assert!(!within(br#"{"a":[1,2,3]}"#, 3));
        assert!(within(br#"{"q":"[[[,,,{{{\"]]],"}"#, 1), "brackets inside a string, escaped quote included");
        assert!(!within(&b"[".repeat(10), 9));
    }
}
