use proptest::prelude::*;

use super::*;

fn secrets(values: &[&str]) -> Secrets {
    Secrets::new(values).expect("valid secrets")
}

fn masked(s: &Secrets, text: &str) -> (String, u64) {
    let (m, n) = s.mask_text(text);
    (m.into_owned(), n)
}

/// Feeds `input` in `chunks` (lengths, the rest in one last chunk) and
/// returns all the stream gave out.
fn streamed(s: &Secrets, input: &[u8], chunks: &[usize]) -> (Vec<u8>, u64) {
    let mut stream = s.stream();
    let mut out = Vec::new();
    let mut rest = input;
    for &n in chunks {
        let (now, later) = rest.split_at(n.min(rest.len()));
        out.extend_from_slice(&stream.push(now));
        assert!(stream.held() < s.longest().max(1), "held {}", stream.held());
        rest = later;
    }
    out.extend_from_slice(&stream.push(rest));
    out.extend_from_slice(&stream.finish());
    assert_eq!(stream.held(), 0);
    (out, stream.masked())
}

#[test]
fn every_occurrence_is_replaced_and_counted() {
    let s = secrets(&["hunter22", "s3cr3t-token"]);
    assert_eq!(
        masked(&s, "a hunter22 b s3cr3t-token c hunter22"),
        ("a [SECRET] b [SECRET] c [SECRET]".to_owned(), 3)
    );
    assert_eq!(masked(&s, "nothing here"), ("nothing here".to_owned(), 0));
    assert!(matches!(s.mask_text("nothing here").0, Cow::Borrowed(_)));
    // Adjacent occurrences are two.
    assert_eq!(masked(&s, "hunter22hunter22").1, 2);
    assert_eq!(s.count(), 2);
}

#[test]
fn overlaps_go_to_the_leftmost_then_the_longest() {
    let s = secrets(&["abcd", "abcdef", "cdxy"]);
    assert_eq!(masked(&s, "abcdefg").0, "[SECRET]g");
    assert_eq!(masked(&s, "abcdxy").0, "[SECRET]xy");
    assert_eq!(masked(&s, "zcdxyabcd").0, "z[SECRET][SECRET]");
}

/// A secret read from a file that a server logs inside a JSON string is
/// masked in that form too.
#[test]
fn the_json_form_of_a_secret_is_masked_too() {
    let s = secrets(&["line1\nline\"2\\"]);
    assert_eq!(
        masked(&s, r#"{"key":"line1\nline\"2\\"} and raw line1"#).0,
        r#"{"key":"[SECRET]"} and raw line1"#
    );
    assert_eq!(masked(&s, "x line1\nline\"2\\ y").0, "x [SECRET] y");
    // Its JSON form is the longest pattern.
    assert_eq!(s.longest(), r#"line1\nline\"2\\"#.len());
}

#[test]
fn limits_are_typed_errors_that_never_show_a_value() {
    let e = Secrets::new(["abc"]).unwrap_err();
    assert_eq!(e, SecretsError::TooShort { index: 0, len: 3 });
    assert!(!e.to_string().contains("abc"), "{e}");
    let e = Secrets::new(["abcd", ""]).unwrap_err();
    assert_eq!(e, SecretsError::TooShort { index: 1, len: 0 });
    let long = vec![b'x'; MAX_SECRET_BYTES + 1];
    assert_eq!(
        Secrets::new([&long]).unwrap_err(),
        SecretsError::TooLong {
            index: 0,
            len: MAX_SECRET_BYTES + 1
        }
    );
    let many: Vec<String> = (0..=MAX_SECRETS).map(|i| format!("secret-{i}")).collect();
    assert_eq!(
        Secrets::new(&many).unwrap_err(),
        SecretsError::TooMany {
            count: MAX_SECRETS + 1
        }
    );
    let big: Vec<Vec<u8>> = (0..5u8).map(|i| vec![b'a' + i; MAX_SECRET_BYTES]).collect();
    assert!(matches!(
        Secrets::new(&big).unwrap_err(),
        SecretsError::TooMuch { .. }
    ));
    // Duplicates count once; the limits themselves are accepted.
    let s = Secrets::new(["abcd", "abcd", &"y".repeat(MAX_SECRET_BYTES)]).unwrap();
    assert_eq!(s.count(), 2);
    assert!(!format!("{s:?}").contains("abcd"));
}

/// Issue 23: a secret split across two reads is masked; the stream holds
/// back only what could begin a secret, so a line of ordinary text is
/// given out at once.
#[test]
fn a_secret_split_across_reads_is_masked_and_ordinary_text_is_not_held() {
    let s = secrets(&["hunter22"]);
    let input = b"log: hunter22 done\n";
    let whole = s.mask(input).0.into_owned();
    assert_eq!(whole, b"log: [SECRET] done\n");
    for cut in 0..=input.len() {
        assert_eq!(streamed(&s, input, &[cut]).0, whole, "cut at {cut}");
        for second in 0..=input.len() - cut {
            assert_eq!(streamed(&s, input, &[cut, second]).0, whole);
        }
    }
    let mut stream = s.stream();
    assert_eq!(&*stream.push(b"ready\n"), b"ready\n");
    assert_eq!(stream.held(), 0);
    assert_eq!(&*stream.push(b"token hunt"), b"token ");
    assert_eq!(stream.held(), 4);
    assert_eq!(&*stream.push(b"ing\n"), b"hunting\n");
    assert_eq!(&*stream.push(b"hunter2"), b"");
    assert_eq!(stream.finish(), b"hunter2");
    // After the end nothing is held back.
    assert_eq!(&*stream.push(b"x hunter"), b"x hunter");
    assert_eq!(stream.masked(), 0);
}

/// A held part that a longer occurrence swallows does not keep a later
/// beginning of a secret from being held.
#[test]
fn a_match_through_the_held_part_still_holds_a_later_beginning() {
    let s = secrets(&["abcdef", "efgh"]);
    let input = b"xabcdefgh";
    let whole = s.mask(input).0.into_owned();
    assert_eq!(whole, b"x[SECRET]gh");
    for cut in 0..=input.len() {
        assert_eq!(streamed(&s, input, &[cut]).0, whole, "cut at {cut}");
    }
    // `cdzz` begins inside `abcd`; `zqqq` begins after it, and is held.
    let s = secrets(&["abcd", "cdzz", "zqqq"]);
    let input = b"abcdzqqq";
    let whole = s.mask(input).0.into_owned();
    assert_eq!(whole, b"[SECRET][SECRET]");
    for cut in 0..=input.len() {
        assert_eq!(streamed(&s, input, &[cut]).0, whole, "cut at {cut}");
    }
}

#[test]
fn a_cut_text_loses_a_trailing_beginning_of_a_secret() {
    let s = secrets(&["hunter22"]);
    assert_eq!(
        s.mask_cut_text("key hunter22 and hunt").0,
        "key [SECRET] and [SECRET]"
    );
    assert_eq!(s.mask_cut_text("key hunter22 and hunt").1, 2);
    assert_eq!(s.mask_cut_text("ends in x").0, "ends in x");
    // Not cut: the same ending stays.
    assert_eq!(masked(&s, "and hunt").0, "and hunt");
}

#[test]
fn a_secret_that_is_not_utf8_leaves_valid_text() {
    let s = Secrets::new([b"\xe2\x82\xac\xe2".as_slice()]).unwrap();
    let (m, n) = s.mask_text("x €€ y");
    assert_eq!(n, 1);
    assert!(m.starts_with("x [SECRET]"), "{m}");
}

fn chunks_of(input: &[u8], sizes: &[usize]) -> Vec<usize> {
    let mut left = input.len();
    sizes
        .iter()
        .map(|&n| {
            let n = n.min(left);
            left -= n;
            n
        })
        .collect()
}

proptest! {
    /// Issue 23 (and G4's rule for streams): any split of the input into
    /// chunks gives the same output and count as masking the whole, and no
    /// secret survives in it.
    #[test]
    fn any_split_masks_like_the_whole_and_no_secret_survives(
        values in prop::collection::vec("[abc]{4,7}", 1..4),
        input in prop::collection::vec(prop::sample::select(b"abcx".to_vec()), 0..160),
        sizes in prop::collection::vec(0usize..24, 0..12),
    ) {
        let s = Secrets::new(&values).unwrap();
        let (whole, count) = s.mask(&input);
        let (out, n) = streamed(&s, &input, &chunks_of(&input, &sizes));
        prop_assert_eq!(&out, whole.as_ref());
        prop_assert_eq!(n, count);
        for v in &values {
            prop_assert!(
                memchr::memmem::find(&out, v.as_bytes()).is_none(),
                "{v} survives in {:?}", String::from_utf8_lossy(&out)
            );
        }
    }

    /// The same with values whose JSON form differs (quotes, backslashes,
    /// newlines) and text that carries both forms.
    #[test]
    fn json_forms_split_anywhere_mask_like_the_whole(
        values in prop::collection::vec("[a\"\\\\\n]{4,6}", 1..3),
        input in prop::collection::vec(prop::sample::select(b"a\"\\\nn".to_vec()), 0..120),
        sizes in prop::collection::vec(0usize..16, 0..10),
    ) {
        let s = Secrets::new(&values).unwrap();
        let (whole, count) = s.mask(&input);
        let (out, n) = streamed(&s, &input, &chunks_of(&input, &sizes));
        prop_assert_eq!(&out, whole.as_ref());
        prop_assert_eq!(n, count);
    }
}
