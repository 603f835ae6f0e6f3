//! "Did you mean": the known name nearest to one that is not known (an env id, a config key, a
//! result key), for error messages. One ranking serves every such message, so a typo is
//! answered the same way wherever it is made.
//!
//! Names are compared ignoring case. A known name that starts with the one given (a name cut
//! short: `vtrace_clip_rho` for `vtrace_clip_rho_threshold`) ranks first; then the fewer edits
//! the better (insertions, deletions, substitutions and swaps of neighbouring characters).

/// The candidate nearest to `name`, however far: for messages that always name one ("the
/// nearest valid key is ..."). `None` only when there are no candidates; among equally near
/// ones, the first.
///
/// ```
/// use impala_core::suggest::nearest;
///
/// let keys = ["lr", "gamma", "vtrace_clip_rho_threshold", "vtrace"];
/// assert_eq!(nearest("gama", keys), Some("gamma"));
/// assert_eq!(nearest("vtrace_clip_rho", keys), Some("vtrace_clip_rho_threshold"));
/// assert_eq!(nearest("seed", keys), Some("lr")); // far, but the nearest
/// ```
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    ranked(name, candidates).map(|(_, candidate)| candidate)
}

/// The candidate `name` was probably meant to be: the nearest (as [`nearest`]) when it starts
/// with `name` or lies within a third of `name`'s length in edits (at least one edit), else
/// `None`, so that a message never suggests an unrelated name.
///
/// ```
/// use impala_core::suggest::did_you_mean;
///
/// let ids = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"];
/// assert_eq!(did_you_mean("cartpole-v0", ids), Some("CartPole-v1"));
/// assert_eq!(did_you_mean("Pendulum", ids), Some("Pendulum-v1"));
/// assert_eq!(did_you_mean("Breakout", ids), None);
/// ```
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let allowed = (name.chars().count() / 3).max(1);
    ranked(name, candidates)
        .filter(|(rank, _)| rank.starts_with_name || rank.edits <= allowed)
        .map(|(_, candidate)| candidate)
}

/// How near a candidate is: one that starts with the name before any other, then by edits.
#[derive(Debug, Clone, Copy)]
struct Rank {
    starts_with_name: bool,
    edits: usize,
}

/// The nearest candidate with its rank.
fn ranked<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<(Rank, &'a str)> {
    let name: Vec<char> = name.chars().flat_map(char::to_lowercase).collect();
    candidates
        .into_iter()
        .map(|candidate| {
            let lower: Vec<char> = candidate.chars().flat_map(char::to_lowercase).collect();
            let starts_with_name = !name.is_empty() && lower.starts_with(&name);
            (Rank { starts_with_name, edits: edits(&name, &lower) }, candidate)
        })
        .min_by_key(|(rank, _)| (!rank.starts_with_name, rank.edits))
}

/// Edits that turn `a` into `b`: insertions, deletions, substitutions and swaps of
/// neighbouring characters (the optimal string alignment distance).
fn edits(a: &[char], b: &[char]) -> usize {
    // d[i][j]: edits between the first i characters of `a` and the first j of `b`.
    let mut d = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn edits_count_insertions_deletions_substitutions_and_swaps() {
        for (a, b, n) in [
            ("", "", 0),
            ("", "abc", 3),
            ("lr", "lrr", 1),
            ("gamma", "gama", 1),
            ("ab", "ba", 1),
            ("episode_reward_mean", "episode_return_mean", 3),
            ("kitten", "sitting", 3),
        ] {
            assert_eq!(edits(&chars(a), &chars(b)), n, "{a} -> {b}");
            assert_eq!(edits(&chars(b), &chars(a)), n, "{b} -> {a}");
        }
    }

    #[test]
    fn a_name_cut_short_ranks_before_fewer_edits() {
        let keys = ["vtrace", "vtrace_clip_rho_threshold", "vtrace_clip_pg_rho_threshold"];
        assert_eq!(nearest("vtrace_clip_rho", keys), Some("vtrace_clip_rho_threshold"));
        // Among names that start with it, the one with the fewest edits.
        let keys = ["entropy_coeff_schedule", "entropy_coeff"];
        assert_eq!(did_you_mean("entropy_coef", keys), Some("entropy_coeff"));
    }

    #[test]
    fn case_is_ignored_and_ties_go_to_the_first() {
        assert_eq!(did_you_mean("CARTPOLE-V1", ["Acrobot-v1", "CartPole-v1"]), Some("CartPole-v1"));
        assert_eq!(nearest("ab", ["ax", "xb"]), Some("ax"));
    }

    #[test]
    fn far_names_are_not_suggested_but_nearest_still_names_one() {
        let keys = ["max_episode_steps", "g"];
        assert_eq!(did_you_mean("max_episode_step", keys), Some("max_episode_steps"));
        assert_eq!(did_you_mean("seed", keys), None);
        assert_eq!(nearest("seed", keys), Some("g"));
        assert_eq!(nearest("x", []), None);
        // Within a third of the name's length: 3 edits of 19 characters, not 3 of 6.
        assert_eq!(
            did_you_mean("episode_reward_mean", ["episode_return_mean"]),
            Some("episode_return_mean")
        );
        assert_eq!(did_you_mean("reward", ["return"]), None);
    }
}
