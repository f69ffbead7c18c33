//! `PMI_process_mapping`: which node each rank runs on, in the "vector" notation that MPICH
//! parses (`MPIR_NODEMAP_populate_ids_from_mapping`) and Slurm and Hydra write:
//! `(vector,(start,count,size),...)`, each block giving `size` consecutive ranks to each of the
//! nodes `start..start+count`, the blocks taken in order and, once every rank of the list is
//! placed and ranks remain, repeated from the first block that starts at node 0.

/// One `(start, count, size)` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    start: u32,
    count: u32,
    size: u32,
}

/// The mapping for ranks placed on `nodes` (the node index of each rank, in rank order):
/// `(vector,(0,2,2))` for two nodes of two ranks each, `(vector,(0,2,1))` for four ranks dealt
/// round robin over two nodes. It is the shortest of the block list and its repeating prefixes
/// that MPICH reads back as `nodes`. An empty list gives `(vector)`.
pub fn process_mapping(nodes: &[u32]) -> String {
    let blocks = blocks(nodes);
    let mut best = &blocks[..];
    // A repeat starts again at node 0, so a shorter list can only end right before a block
    // that starts at node 0 (and must itself start there).
    if blocks.first().is_some_and(|b| b.start == 0) {
        for p in 1..blocks.len() {
            if blocks[p].start == 0 && decodes_to(&blocks[..p], nodes) {
                best = &blocks[..p];
                break;
            }
        }
    }
    let mut s = String::from("(vector");
    for b in best {
        s.push_str(&format!(",({},{},{})", b.start, b.count, b.size));
    }
    s.push(')');
    s
}

/// Runs of equal nodes, merged into blocks where a run continues the previous block: the next
/// node with the same number of ranks.
fn blocks(nodes: &[u32]) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        let node = nodes[i];
        let mut j = i;
        while j < nodes.len() && nodes[j] == node {
            j += 1;
        }
        let run = (j - i) as u32;
        match out.last_mut() {
            Some(b) if b.size == run && b.start.checked_add(b.count) == Some(node) => b.count += 1,
            _ => out.push(Block { start: node, count: 1, size: run }),
        }
        i = j;
    }
    out
}

/// Whether MPICH's reading of `blocks` for `nodes.len()` ranks gives `nodes`, stopping at the
/// first difference.
fn decodes_to(blocks: &[Block], nodes: &[u32]) -> bool {
    let mut i = 0;
    let ok = walk(blocks, nodes.len(), |node| {
        let same = nodes[i] == node;
        i += 1;
        same
    });
    ok && i == nodes.len()
}

/// MPICH's loop: the blocks in order, then again from the first block that starts at node 0,
/// calling `place` with each rank's node until `size` ranks are placed or `place` says stop.
/// Returns false when it stopped early or the blocks place no rank at all.
fn walk(blocks: &[Block], size: usize, mut place: impl FnMut(u32) -> bool) -> bool {
    if size == 0 {
        return true;
    }
    let mut placed = 0;
    let mut wrapped = false;
    loop {
        // MPICH starts a repeat at the first block that starts at node 0 once it has seen
        // one, else at the first block.
        let first = if wrapped { blocks.iter().position(|b| b.start == 0).unwrap_or(0) } else { 0 };
        let before = placed;
        for b in &blocks[first..] {
            if b.start == 0 {
                wrapped = true;
            }
            for n in 0..b.count {
                for _ in 0..b.size {
                    if !place(b.start + n) {
                        return false;
                    }
                    placed += 1;
                    if placed == size {
                        return true;
                    }
                }
            }
        }
        if placed == before {
            // Every block is empty: MPICH would loop for ever; such a list is never written.
            return false;
        }
    }
}

/// MPICH's reading of a mapping string for `size` ranks (tests only): the node of each rank.
#[cfg(test)]
pub(crate) fn decode(mapping: &str, size: usize) -> Option<Vec<u32>> {
    let inner = mapping.trim().strip_prefix('(')?.strip_suffix(')')?;
    let rest = inner.trim_start().strip_prefix("vector")?;
    let mut blocks = Vec::new();
    for part in rest.split(')').filter(|p| !p.trim().is_empty()) {
        let part = part.trim().strip_prefix(',')?.trim().strip_prefix('(')?;
        let nums: Vec<u32> = part.split(',').map(|x| x.trim().parse().ok()).collect::<Option<_>>()?;
        let [start, count, size] = nums[..] else { return None };
        blocks.push(Block { start, count, size });
    }
    let mut out = Vec::with_capacity(size);
    walk(&blocks, size, |n| {
        out.push(n);
        true
    })
    .then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(nodes: &[u32], want: &str) {
        let got = process_mapping(nodes);
        assert_eq!(got, want, "for {nodes:?}");
        assert_eq!(decode(&got, nodes.len()).as_deref(), Some(nodes), "{got} read back");
    }

    #[test]
    fn block_and_cyclic_layouts() {
        check(&[0, 0, 1, 1], "(vector,(0,2,2))");
        check(&[0, 1, 0, 1], "(vector,(0,2,1))");
        check(&[0, 1, 0], "(vector,(0,2,1))");
        check(&[0], "(vector,(0,1,1))");
        check(&[0, 0, 0, 1, 1, 2], "(vector,(0,1,3),(1,1,2),(2,1,1))");
        // Slurm's plane distribution with plane 2 over 2 nodes: 0 0 1 1 0 0 1 1.
        check(&[0, 0, 1, 1, 0, 0, 1, 1], "(vector,(0,2,2))");
        // Not starting at node 0: a repeat would start at node 0, so none is used.
        check(&[1, 0, 1, 0], "(vector,(1,1,1),(0,2,1),(0,1,1))");
        // Arbitrary placement.
        check(&[2, 2, 0, 1, 1, 0], "(vector,(2,1,2),(0,1,1),(1,1,2),(0,1,1))");
        assert_eq!(process_mapping(&[]), "(vector)");
    }

    #[test]
    fn every_small_layout_reads_back() {
        // Every placement of up to 7 ranks on up to 3 nodes.
        for size in 1..=7u32 {
            for code in 0..3u32.pow(size) {
                let nodes: Vec<u32> = (0..size).map(|i| code / 3u32.pow(i) % 3).collect();
                let m = process_mapping(&nodes);
                assert_eq!(decode(&m, nodes.len()), Some(nodes.clone()), "{m} for {nodes:?}");
            }
        }
    }

    #[test]
    fn large_regular_layouts_stay_short() {
        let cyclic: Vec<u32> = (0..4096).map(|r| r % 64).collect();
        assert_eq!(process_mapping(&cyclic), "(vector,(0,64,1))");
        let block: Vec<u32> = (0..4096).map(|r| r / 8).collect();
        assert_eq!(process_mapping(&block), "(vector,(0,512,8))");
    }
}
