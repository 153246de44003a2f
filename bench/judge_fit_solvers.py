"""The combined judge's fit refitted from the dev set's tune pairs with Newton's method (the
code before issue 42) and with scikit-learn (the code now): the written weights, cut and
accuracy compared, as ``pbench judge --fit`` would write them. Runs the tiny judge on the
tune rows (about 12 minutes on 2 cores without a warm response cache).

    .venv/bin/python bench/judge_fit_solvers.py
"""

import json
import time

import numpy as np

from pbench import config, judgefit, judging, llm, store, validation


def newton(X: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 50) -> np.ndarray:
    """The weights as pbench fitted them before scikit-learn: Newton's method, bias unpenalised."""
    w = np.zeros(X.shape[1])
    penalty = np.full(X.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-np.clip(X @ w, -40, 40)))
        grad = X.T @ (p - y) + penalty * w
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.diag(penalty) + 1e-9 * np.eye(X.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return w


def main() -> None:
    start = time.time()
    cfg = config.load("params/tiny.yaml")
    rows, _ = judging.read_rows(validation.default_dev_set())
    tune = validation.dev_sample(rows, None, 0, "tune")
    roles = llm.Roles(cfg, cfg.outputs_dir / cfg.run_name)
    panel = judging.Panel(roles.panel("judge"), "combined", cfg.judging.match_threshold, cfg.seed, record=[])
    items = judgefit.pairs(panel, tune)
    print(f"{len(items)} tune pairs in {time.time() - start:.0f} s")
    ours = judgefit.fit_both(items)
    library = judgefit.fit
    judgefit.fit = lambda X, y, l2=1.0: newton(X, y, l2)  # type: ignore[assignment]
    try:
        before = judgefit.fit_both(items)
    finally:
        judgefit.fit = library
    shipped = json.loads((store.PACKAGE_DATA / "judge_fit.json").read_text())
    for name, found in (("shipped", shipped), ("newton", before), ("scikit-learn", ours)):
        print(name, json.dumps({k: found[k] for k in ("weights", "cut", "tune_pair_accuracy", "pairs")}))
        print("   without_model", json.dumps(found["without_model"]))
    same = all(before[k] == ours[k] for k in ("weights", "cut", "tune_pair_accuracy", "without_model"))
    print(f"newton and scikit-learn write the same fit: {same}")


if __name__ == "__main__":
    main()
