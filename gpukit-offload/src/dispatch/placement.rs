//! Several GPUs (issue 24): the decisions, pure functions tested on simulated device sets;
//! [`crate::gpu::devices`] runs them (one backend per visible GPU, each with its own lanes),
//! and one GPU behaves exactly as before.
//!
//! * The device set is `CUDA_VISIBLE_DEVICES` as CUDA reads it ([`visible`]): a call is placed
//!   on ordinals `0..count` of that set, so `gpumutex-run --num-devices 2 -- offload run ...`
//!   composes.
//! * Concurrent calls go to the GPU with the least compute queued ([`place`]): the queues are the
//!   per-GPU versions of [`super::load`]'s (this process's calls in flight plus the load board of
//!   each GPU).
//! * A single very large product may be split by columns of B (and C) across GPUs
//!   ([`split_product`]): each GPU gets all of A and its share of B's columns; the split is taken
//!   only when the slowest part (A's copy, its columns' copies and its share of the compute,
//!   after the queue of its GPU) beats the whole call on the best single GPU. Other routines
//!   (factorisations) stay whole: the model decides them on one GPU.

/// The device set a process sees: the entries of `CUDA_VISIBLE_DEVICES` (`None`: unset, every
/// device of the machine, `count` of them), cut at the first invalid entry as CUDA does.
pub fn visible(cuda_visible_devices: Option<&str>, count: usize) -> Vec<String> {
    match cuda_visible_devices {
        None => (0..count).map(|i| i.to_string()).collect(),
        Some(v) => v
            .split(',')
            .map(str::trim)
            .take_while(|s| {
                !s.is_empty()
                    && (s.parse::<u32>().is_ok() || s.starts_with("GPU-") || s.starts_with("MIG-"))
            })
            .map(String::from)
            .collect(),
    }
}

/// The GPU (ordinal in the visible set) for the next call: the least queued seconds, the
/// lowest ordinal among equals; `None` for an empty set.
pub fn place(queued_s: &[f64]) -> Option<usize> {
    queued_s
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(&b.0)))
        .map(|(i, _)| i)
}

/// A product's cost parts on one GPU: seconds to copy A in, to copy all of B in and C out, and
/// to compute the whole product.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProductCost {
    /// Copying A to a GPU.
    pub a_copy_s: f64,
    /// Copying B in and C out (split with the columns).
    pub bc_copy_s: f64,
    /// The whole product's compute.
    pub compute_s: f64,
}

/// The cost parts of a gemm (`m x n x k`, C read when `read_c`) from its estimate on one
/// GPU: the host-to-device time split between A and the rest by bytes.
pub fn product_cost(
    e: &crate::model::Estimate,
    (m, n, k): (usize, usize, usize),
    read_c: bool,
) -> ProductCost {
    let a = (m * k) as f64;
    let rest = (k * n + if read_c { m * n } else { 0 }) as f64;
    let a_share = if a + rest > 0.0 { a / (a + rest) } else { 0.0 };
    ProductCost {
        a_copy_s: e.h2d_s * a_share,
        bc_copy_s: e.h2d_s * (1.0 - a_share) + e.d2h_s,
        compute_s: e.compute_s,
    }
}

/// How to run a product on GPUs with these queues: `(gpu, share of B's columns)` for each GPU
/// used (shares sum to 1). One GPU (the least queued) unless a split finishes sooner; with one
/// GPU visible, always that one whole. The copies share the host's link (A goes to every GPU
/// used, so `g` GPUs pay `g` copies of A there), the computes run side by side, each after its
/// GPU's queue, with shares that make them finish together.
pub fn split_product(cost: ProductCost, queued_s: &[f64]) -> Vec<(usize, f64)> {
    let Some(best) = place(queued_s) else {
        return Vec::new();
    };
    let whole = queued_s[best] + cost.a_copy_s + cost.bc_copy_s + cost.compute_s;
    let mut order: Vec<usize> = (0..queued_s.len()).collect();
    order.sort_by(|&a, &b| queued_s[a].total_cmp(&queued_s[b]).then(a.cmp(&b)));
    let mut plan = vec![(best, 1.0)];
    let mut plan_t = whole;
    if cost.compute_s <= 0.0 {
        return plan;
    }
    for g in 2..=order.len() {
        let used = &order[..g];
        // computes finishing together: queue_i + a_copy + share_i * compute = t_compute
        let t_compute = (cost.compute_s
            + used
                .iter()
                .map(|&i| queued_s[i] + cost.a_copy_s)
                .sum::<f64>())
            / g as f64;
        let shares: Vec<f64> = used
            .iter()
            .map(|&i| (t_compute - queued_s[i] - cost.a_copy_s) / cost.compute_s)
            .collect();
        if shares.iter().any(|s| *s <= 0.0) {
            break;
        }
        let t = t_compute.max(g as f64 * cost.a_copy_s + cost.bc_copy_s);
        if t < plan_t {
            plan_t = t;
            plan = used.iter().copied().zip(shares).collect();
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_set_obeys_cuda_visible_devices() {
        assert_eq!(visible(None, 2), vec!["0", "1"]);
        assert_eq!(visible(Some("3,1"), 8), vec!["3", "1"]);
        assert_eq!(visible(Some("GPU-abc, 2"), 8), vec!["GPU-abc", "2"]);
        // CUDA stops at the first invalid entry; an empty value hides every device
        assert_eq!(visible(Some("1,x,2"), 8), vec!["1"]);
        assert!(visible(Some(""), 8).is_empty());
    }

    /// Concurrent calls spread by queue; one GPU gets everything, as before.
    #[test]
    fn concurrent_calls_go_to_the_least_queued_gpu() {
        assert_eq!(place(&[0.0]), Some(0));
        assert_eq!(place(&[5.0]), Some(0));
        assert_eq!(place(&[]), None);
        assert_eq!(place(&[0.3, 0.1, 0.2]), Some(1));
        assert_eq!(place(&[0.2, 0.2]), Some(0));
        // four calls of 1 s each placed one after another on two idle GPUs: two on each
        let mut q = [0.0, 0.0];
        for _ in 0..4 {
            let g = place(&q).unwrap();
            q[g] += 1.0;
        }
        assert_eq!(q, [2.0, 2.0]);
    }

    #[test]
    fn a_products_copies_split_by_bytes() {
        let e = crate::model::Estimate {
            cpu_s: 1.0,
            cpu_known: true,
            gpu_s: 0.5,
            h2d_s: 0.2,
            compute_s: 0.25,
            d2h_s: 0.05,
        };
        // A is m x k = 100 x 100, B k x n = 100 x 300: A is a quarter of the bytes in
        let c = product_cost(&e, (100, 300, 100), false);
        assert!((c.a_copy_s - 0.05).abs() < 1e-12);
        assert!((c.bc_copy_s - 0.2).abs() < 1e-12);
        assert_eq!(c.compute_s, 0.25);
        // C read too: A is a seventh
        let c = product_cost(&e, (100, 300, 100), true);
        assert!((c.a_copy_s - 0.2 / 7.0).abs() < 1e-12);
        assert!((c.a_copy_s + c.bc_copy_s - 0.25).abs() < 1e-12);
    }

    /// A large product splits across idle GPUs when compute dwarfs A's copy; a small one, one
    /// GPU, or a busy second GPU keeps it whole; shares sum to one and finish together.
    #[test]
    fn a_large_product_is_split_where_that_is_faster() {
        let big = ProductCost {
            a_copy_s: 0.01,
            bc_copy_s: 0.02,
            compute_s: 1.0,
        };
        assert_eq!(split_product(big, &[0.0]), vec![(0, 1.0)]);
        let p = split_product(big, &[0.0, 0.0]);
        assert_eq!(p.len(), 2);
        assert!((p.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((p[0].1 - 0.5).abs() < 1e-12, "{p:?}");
        let p4 = split_product(big, &[0.0; 4]);
        assert_eq!(p4.len(), 4);
        // copy-bound: A's copy costs more than the compute saved
        let small = ProductCost {
            a_copy_s: 0.05,
            bc_copy_s: 0.01,
            compute_s: 0.04,
        };
        assert_eq!(split_product(small, &[0.0, 0.0]), vec![(0, 1.0)]);
        // the second GPU is busy for longer than the whole call takes on the first
        assert_eq!(split_product(big, &[0.0, 5.0]), vec![(0, 1.0)]);
        // partly busy: the busier GPU gets the smaller share, both finish together
        let p = split_product(big, &[0.0, 0.3]);
        assert_eq!(p.len(), 2);
        let end = |(g, s): (usize, f64)| [0.0, 0.3][g] + big.a_copy_s + s * big.compute_s;
        assert!(
            (end(p[0]) - end(p[1])).abs() < 1e-9 && p[0].1 > p[1].1,
            "{p:?}"
        );
    }
}
