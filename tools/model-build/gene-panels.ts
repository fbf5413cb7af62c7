// Real human gene symbols (HGNC) from two published breast-cancer panels.

/** PAM50 intrinsic-subtype classifier genes (Parker et al., J Clin Oncol 2009; 27:1160-7). */
export const PAM50 = [
  'ACTR3B', 'ANLN', 'BAG1', 'BCL2', 'BIRC5', 'BLVRA', 'CCNB1', 'CCNE1', 'CDC20', 'CDC6',
  'CDH3', 'CENPF', 'CEP55', 'CXXC5', 'EGFR', 'ERBB2', 'ESR1', 'EXO1', 'FGFR4', 'FOXA1',
  'FOXC1', 'GPR160', 'GRB7', 'KIF2C', 'KRT14', 'KRT17', 'KRT5', 'MAPT', 'MDM2', 'MELK',
  'MIA', 'MKI67', 'MLPH', 'MMP11', 'MYBL2', 'MYC', 'NAT1', 'NDC80', 'NUF2', 'ORC6',
  'PGR', 'PHGDH', 'PTTG1', 'RRM2', 'SFRP1', 'SLC39A6', 'TMEM45B', 'TYMS', 'UBE2C', 'UBE2T',
];

/** Oncotype DX 21-gene recurrence score: 16 cancer genes and 5 reference genes (Paik et al., N Engl J Med 2004; 351:2817-26). */
export const ONCOTYPE_DX_21 = [
  'MKI67', 'AURKA', 'BIRC5', 'CCNB1', 'MYBL2', 'MMP11', 'CTSV', 'GRB7', 'ERBB2', 'ESR1', 'PGR',
  'BCL2', 'SCUBE2', 'GSTM1', 'CD68', 'BAG1', 'ACTB', 'GAPDH', 'RPLP0', 'GUSB', 'TFRC',
];
