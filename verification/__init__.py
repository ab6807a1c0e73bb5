"""The verification rules and the lossless verifier.

`rules` (reference rules, floats or Fractions) and `rules_torch` (their batched twin, used by the
engine) are written once; the verifier proves a sampler lossless by exact enumeration (`exact`)
or statistical tests (`statistical`, `laws`, `batched`) on the cases of `cases`, and must catch
every mutant of `mutants`. `inputs` checks what a user's sampler, case and target are before
any enumeration; `memo` holds exact mode's memoised sub-states."""
