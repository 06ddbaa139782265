"""What the scores are worth: metrics, decision thresholds, reports, and the controlled-contamination
experiment.

- ``metrics.py``: AUROC, ROC, TPR at low FPR, paired bootstrap CIs, the permutation control, Holm's correction.
- ``power.py``: the minimum detectable AUROC of each verdict's test at a run's sizes.
- ``thresholds.py``: calibrated decision thresholds and per-document contamination rates.
- ``blind.py``: the model-free baselines of one sample: their out-of-fold scores, refit tests and held-out telltales.
- ``blind_features.py``: what the baselines read from the texts (words, dates, character n-grams), read once.
- ``blind_fits.py``: each baseline's out-of-fold fit: the fold split, the word and date classifiers, the greedy
  n-gram selection.
- ``blind_refit.py``: the baselines' permutation tests, every shuffle of the labels refitted.
- ``verdicts.py``: what a report says in plain words (leak, above chance, above the baselines, a suite's known
  leak), each with its power.
- ``assessment.py``: the baselines, every column's metrics and the verdicts of one run (eval and demo share it).
- ``columns.py``: the score columns a report shows: ranked, each k-method family at its best k, model-free marked.
- ``figures.py``: matplotlib on the Agg backend, and the report's ROC curves, histograms and AUROC against k.
- ``report.py``: metrics.json (written and read back), report.md, report.html, the text table.
- ``comparison.py``: two reports side by side, with a warning for each difference in what they were made from.
- ``workflows.py``: evaluate_file, calibrate_file, classify_file, audit_unlearning_file, infer_dataset: the
  commands' workflows.
- ``unlearning.py``: the unlearning audit: before/after scores, ratio or threshold rule, its report.
- ``dataset_inference.py``: dataset inference (Maini et al. 2024): features, a linear model, a Welch t-test.
- ``experiments.py``: the controlled-contamination experiment (plant members, score, report).
- ``probe.py``: training the probe: proxy fine-tuning, every layer's activations, a logistic regression per layer.
"""
