"""the retention policy of a table's last expiry (keep_last, hourly, daily tiers)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 13:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tsb_table_expiry', schema=None) as batch_op:
        batch_op.add_column(sa.Column('retention', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tsb_table_expiry', schema=None) as batch_op:
        batch_op.drop_column('retention')
