//! Control characters made visible: every user-chosen string a command prints (job and step
//! names, comments, wckeys, paths, accounts, partitions, reasons, service names and commands,
//! error messages that echo an argument) goes through [`visible`] (or [`visible_text`] for a
//! message of several lines) before it reaches a terminal, so a name such as
//! `$'\e]0;pwned\a\e[2J'` cannot retitle, clear or reprogram the terminal of whoever lists it.
//!
//! The visible form is caret notation, as `cat -v` and `less` write it: C0 `U+0000`-`U+001F`
//! as `^@`..`^_` (ESC is `^[`, a newline `^J`, a tab `^I`), DEL as `^?`, and the C1 controls
//! `U+0080`-`U+009F` as `M-^@`..`M-^_` (CSI, `U+009B`, is `M-^[`). Everything else, `|`
//! included, is left as it is: `-P` output escapes control characters only, as Slurm's.

use std::borrow::Cow;

/// Whether `c` is a control character a terminal may act on: C0, DEL or C1.
pub fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Whether the JSON text `json` may hold a control character in a string or a key once decoded:
/// a raw control byte (C0 or DEL), C1 encoded as UTF-8 (`C2 80`..`C2 9F`), or an escape that
/// could decode to one (`\b \f \n \r \t`, `\u00` followed by `0`, `1`, `7`, `8` or `9`; an
/// escaped backslash is skipped whole, so `\\n` is a backslash and an `n`). It may answer yes
/// for text that holds none (a raw newline between values, `\u00a0`), never no for text that
/// holds one: a reply it says no to is decoded as it is, without a walk through every string
/// ([`visible`]'s callers' slow path).
pub fn json_may_hold_control(json: &[u8]) -> bool {
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            0..=0x1f | 0x7f => return true,
            0xc2 if json.get(i + 1).is_some_and(|b| (0x80..=0x9f).contains(b)) => return true,
            b'\\' => match json.get(i + 1) {
                Some(b'b' | b'f' | b'n' | b'r' | b't') => return true,
                Some(b'u') if json.get(i + 2..i + 4) == Some(b"00") && json.get(i + 4).is_some_and(|b| b"01789".contains(b)) => {
                    return true;
                }
                // Any other escape (`\\`, `\"`, `\/`, another `\u`): its two bytes are skipped.
                _ => i += 1,
            },
            _ => {}
        }
        i += 1;
    }
    false
}

/// `s` with every control character (C0, newline and tab included, DEL, C1) in caret notation;
/// borrowed when there is none.
pub fn visible(s: &str) -> Cow<'_, str> {
    escape(s, |_| true)
}

/// [`visible`] for a message of several lines: newlines and tabs are kept, every other
/// control character is made visible.
pub fn visible_text(s: &str) -> Cow<'_, str> {
    escape(s, |c| c != '\n' && c != '\t')
}

fn escape(s: &str, shown: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_control(c) && shown(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !(is_control(c) && shown(c)) {
            out.push(c);
            continue;
        }
        let n = c as u32;
        if n >= 0x80 {
            out.push_str("M-");
        }
        match n & 0x7f {
            0x7f => out.push_str("^?"),
            low => {
                out.push('^');
                out.push(char::from(b'@' + low as u8));
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_that_may_hold_a_control_character_is_never_missed() {
        // Every control character, in a string and in a key, as serde_json writes it and as
        // other writers may (`\u` escapes of either case, raw C1 and DEL): always yes.
        for n in (0u32..0x20).chain(0x7f..0xa0) {
            let c = char::from_u32(n).unwrap();
            let s = c.to_string();
            for text in [
                serde_json::to_string(&serde_json::json!({"name": format!("a{s}b")})).unwrap(),
                serde_json::to_string(&serde_json::json!({format!("k{s}"): 1})).unwrap(),
                format!("[\"\\u{n:04x}\"]"),
                format!("[\"\\u{n:04X}\"]"),
            ] {
                assert!(json_may_hold_control(text.as_bytes()), "{n:#x}: {text:?}");
                let back: serde_json::Value = serde_json::from_str(&text).unwrap();
                let decoded: String = match &back {
                    serde_json::Value::Object(m) => m.iter().map(|(k, v)| format!("{k}{}", v.as_str().unwrap_or(""))).collect(),
                    v => v[0].as_str().unwrap().to_string(),
                };
                assert!(decoded.contains(c), "{text:?} holds {c:?}");
            }
        }
        // Plain text, other escapes and characters beyond C1: no, so it is decoded directly.
        for text in [r#"{"a":"b","n":[1,2.5,null,true],"q":"\"x\"","p":"a\/b","s":"a\\b"}"#, r#"["é ü € 😀 \u00a0 \u00e9 \ud83d\ude00"]"#]
        {
            assert!(!json_may_hold_control(text.as_bytes()), "{text}");
        }
        // A backslash then `n` as text is no control character; an escaped quote or backslash
        // before an escape does not hide it.
        assert!(!json_may_hold_control(br#"["\\n"]"#));
        assert!(json_may_hold_control(br#"["\"\n"]"#));
        assert!(json_may_hold_control(br#"["\\\n"]"#));
        // An escape cut at the end of the text is not read past it.
        assert!(!json_may_hold_control(b"\\"));
        assert!(!json_may_hold_control(b"\\u00"));
    }

    #[test]
    fn every_c0_del_and_c1_character_is_made_visible() {
        for n in (0u32..0x20).chain(0x7f..0xa0) {
            let c = char::from_u32(n).unwrap();
            let v = visible(&c.to_string()).into_owned();
            assert!(!v.chars().any(is_control), "{n:#x} -> {v:?}");
            assert!(v.starts_with('^') || v.starts_with("M-^"), "{n:#x} -> {v:?}");
        }
        assert_eq!(visible("\u{1b}]0;pwned\u{7}\u{1b}[2J"), "^[]0;pwned^G^[[2J");
        assert_eq!(visible("a\u{9b}31mb\u{7f}\u{0}"), "aM-^[31mb^?^@");
        assert_eq!(visible("line\nnext\tcol\r"), "line^Jnext^Icol^M");
        assert_eq!(visible("\u{80}\u{9f}"), "M-^@M-^_");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in ["", "job-1", "a|b|c", "héllo wörld", "日本語", "\u{a0}\u{ff}\u{fffd}", "^[ literal"] {
            assert!(matches!(visible(s), Cow::Borrowed(b) if b == s), "{s:?}");
        }
    }

    #[test]
    fn text_keeps_its_lines_and_tabs() {
        assert_eq!(visible_text("usage:\n\t-J \u{1b}[2J\u{9b}"), "usage:\n\t-J ^[[2JM-^[");
    }

    #[test]
    fn malformed_and_long_inputs_never_pass_a_control_through() {
        // Bytes that are not UTF-8 reach a command as U+FFFD (lossy decoding), and UTF-8 that
        // spells C1 (0xC2 0x9B) decodes to the control itself.
        let bytes: &[u8] = b"\xff\xfe\x1b[2J\xc2\x9b\xc0\x80\xed\xa0\x80\xf4\x90\x80\x80\x7f";
        let s = String::from_utf8_lossy(bytes);
        let v = visible(&s);
        assert!(!v.chars().any(is_control), "{v:?}");
        assert!(v.contains("^[[2J") && v.contains("M-^[") && v.contains("^?") && v.contains('\u{fffd}'), "{v:?}");
        // Every character there is, and a long run of escapes.
        let all: String = (0u32..0x110000).filter_map(char::from_u32).collect();
        let v = visible(&all);
        assert!(!v.chars().any(is_control));
        // C0 and DEL grow by one byte each (`^X`), C1 by two (two bytes become `M-^X`).
        assert_eq!(v.len(), all.len() + 32 + 1 + 2 * 32);
        let long = "\u{1b}".repeat(1 << 20);
        assert_eq!(visible(&long).len(), 2 << 20);
    }
}
