"""Fairness between tenants (docs/fairness-and-scoring.md): dominant shares, hierarchical DRF order, progressive
filling, admission.

Pure functions over exact amounts (`fractions.Fraction`); see docs/fairness-and-scoring.md.
"""

from eru.fairness.admission import Admission, PendingRequest, Verdict, admission_order, charge, check_limit
from eru.fairness.drf import (
    Resources,
    Tenant,
    TenantUsage,
    below_quota,
    dominant_resource,
    dominant_share,
    drf_order,
    limit_excess,
    order_key,
)
from eru.fairness.filling import FillingResult, FillingTenant, progressive_filling

__all__ = [
    "Admission",
    "FillingResult",
    "FillingTenant",
    "PendingRequest",
    "Resources",
    "Tenant",
    "TenantUsage",
    "Verdict",
    "admission_order",
    "below_quota",
    "charge",
    "check_limit",
    "dominant_resource",
    "dominant_share",
    "drf_order",
    "limit_excess",
    "order_key",
    "progressive_filling",
]
