"""PRIMORL's reproductions: Table 1 (`table1`, and the MOPO row, `mopo`), Table 11 (`table11`),
Figure 3 (`fig3`) and the ablation (`ablation`), on the sweep runner (`sweeps`)."""
