//! Slurm's hostlist syntax: `gpu[01-04,07],login1`.

use crate::Invalid;

/// Splits a name into (prefix, number, digits) when it ends in digits.
fn split(name: &str) -> Option<(&str, u64, usize)> {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 18 {
        return None;
    }
    let (p, d) = name.split_at(name.len() - digits);
    Some((p, d.parse().ok()?, digits))
}

/// Compresses host names into hostlist syntax, keeping the given order of first appearance for
/// prefixes and merging consecutive numbers of equal width: `[n01, n02, n03, x]` → `n[01-03],x`.
pub fn compress(names: &[String]) -> String {
    let mut groups: Vec<(String, usize, Vec<u64>)> = Vec::new();
    let mut out: Vec<String> = Vec::new();
    let mut order: Vec<(bool, usize)> = Vec::new(); // (is group, index)
    for n in names {
        match split(n) {
            Some((p, v, w)) => match groups.iter().position(|(gp, gw, _)| gp == p && *gw == w) {
                Some(i) => groups[i].2.push(v),
                None => {
                    groups.push((p.to_string(), w, vec![v]));
                    order.push((true, groups.len() - 1));
                }
            },
            None => {
                out.push(n.clone());
                order.push((false, out.len() - 1));
            }
        }
    }
    let mut parts = Vec::new();
    for (is_group, i) in order {
        if !is_group {
            parts.push(out[i].clone());
            continue;
        }
        let (p, w, nums) = &mut groups[i];
        nums.sort_unstable();
        nums.dedup();
        if nums.len() == 1 {
            parts.push(format!("{p}{:0w$}", nums[0], w = *w));
            continue;
        }
        let mut ranges = Vec::new();
        let mut start = nums[0];
        let mut prev = nums[0];
        for &v in &nums[1..] {
            if v != prev + 1 {
                ranges.push((start, prev));
                start = v;
            }
            prev = v;
        }
        ranges.push((start, prev));
        let r: Vec<String> =
            ranges.iter().map(|&(a, b)| if a == b { format!("{a:0w$}", w = *w) } else { format!("{a:0w$}-{b:0w$}", w = *w) }).collect();
        parts.push(format!("{p}[{}]", r.join(",")));
    }
    parts.join(",")
}

/// Longest host name [`expand`] gives (DNS names are at most 253 bytes).
pub const MAX_HOST_NAME: usize = 255;

/// Expands hostlist syntax into names. At most `limit` names (a bound against `n[0-99999999]`),
/// each at most [`MAX_HOST_NAME`] bytes (a bound against `n[000...0001-99999]`).
pub fn expand(list: &str, limit: usize) -> Result<Vec<String>, Invalid> {
    let bad = |why: &str| Invalid::new(format!("invalid hostlist {list:?}: {why}"));
    let mut items = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in list.chars() {
        match c {
            '[' => {
                depth += 1;
                if depth > 1 {
                    return Err(bad("nested brackets"));
                }
                cur.push(c);
            }
            ']' => {
                if depth == 0 {
                    return Err(bad("unbalanced ']'"));
                }
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut cur)),
            c if c.is_whitespace() => return Err(bad("spaces are not allowed")),
            c => cur.push(c),
        }
    }
    if depth != 0 {
        return Err(bad("unbalanced '['"));
    }
    items.push(cur);
    let mut out = Vec::new();
    for item in items {
        if item.is_empty() {
            return Err(bad("empty name"));
        }
        let Some(open) = item.find('[') else {
            if item.len() > MAX_HOST_NAME {
                return Err(bad(&format!("a name longer than {MAX_HOST_NAME} bytes")));
            }
            if out.len() >= limit {
                return Err(bad(&format!("more than {limit} names")));
            }
            out.push(item);
            continue;
        };
        let close = item.rfind(']').ok_or_else(|| bad("unbalanced '['"))?;
        let (prefix, inner, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        for r in inner.split(',') {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            if a.is_empty() || !a.bytes().all(|x| x.is_ascii_digit()) || !b.bytes().all(|x| x.is_ascii_digit()) || b.is_empty() {
                return Err(bad("ranges are numbers like 01-04"));
            }
            let (x, y): (u64, u64) = (a.parse().map_err(|_| bad("number too large"))?, b.parse().map_err(|_| bad("number too large"))?);
            if x > y {
                return Err(bad("a range must go upwards"));
            }
            if prefix.len() + a.len().max(b.len()) + suffix.len() > MAX_HOST_NAME {
                return Err(bad(&format!("a name longer than {MAX_HOST_NAME} bytes")));
            }
            if y - x >= limit.saturating_sub(out.len()) as u64 {
                return Err(bad(&format!("more than {limit} names")));
            }
            for v in x..=y {
                out.push(format!("{prefix}{v:0w$}{suffix}", w = a.len()));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn compress_and_expand() {
        assert_eq!(compress(&s(&["gpu01", "gpu02", "gpu03", "gpu07", "login"])), "gpu[01-03,07],login");
        assert_eq!(compress(&s(&["n1"])), "n1");
        assert_eq!(compress(&s(&["a9", "a10"])), "a9,a10", "different widths stay apart");
        assert_eq!(expand("gpu[01-03,07],login", 100).unwrap(), s(&["gpu01", "gpu02", "gpu03", "gpu07", "login"]));
        for bad in ["gpu[01-", "gpu]", "a,,b", "n[3-1]", "n[a-b]", "n[[1]]", "a b", "n[0-99999999]"] {
            assert!(expand(bad, 1000).is_err(), "{bad:?}");
        }
        // fuzz/regressions/hostlist/: 3,000-digit padding made 100,000 names of 3 kB each.
        let wide = format!("n[{}-99999]", "0".repeat(3000));
        assert!(expand(&wide, 100_000).unwrap_err().0.contains("longer than 255 bytes"));
        assert!(expand(&"x".repeat(256), 10).is_err() && expand(&"x".repeat(255), 10).is_ok());
        assert_eq!(expand(&format!("{}[1-2]", "x".repeat(254)), 10).unwrap().len(), 2);
        assert!(expand(&format!("{}[1-10]", "x".repeat(254)), 20).is_err(), "x...x10 would be 256 bytes");
        // fuzz/regressions/sbatch/: the limit check overflowed (a panic in debug builds; in
        // release, 2^64 names).
        assert!(expand("a,n[0-18446744073709551615]", 100_000).unwrap_err().0.contains("more than 100000 names"));
        // fuzz/regressions/hostlist/: names without brackets did not count towards the limit.
        assert_eq!(expand("a,b,n[1-2]", 4).unwrap().len(), 4);
        assert!(expand("a,b,n[1-2],c", 4).is_err() && expand("n[1-3],a,b", 4).is_err() && expand("a,b,c", 2).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(nums in prop::collection::btree_set(0u64..300, 1..40)) {
            let names: Vec<String> = nums.iter().map(|n| format!("node{n:03}")).collect();
            prop_assert_eq!(expand(&compress(&names), 10_000).unwrap(), names);
        }
    }
}
