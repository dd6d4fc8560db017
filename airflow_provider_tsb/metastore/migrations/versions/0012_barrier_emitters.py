"""Barrier emitters (tsb_emitter): one emitter generates a topology's barriers at a time

Two emitters on one topology raced: one read the root versions, the other generated a barrier
at newer ones, and the first died with a false "restored" error. The emitter that holds a
topology's lease is recorded here; another one waits as a standby.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 02:35:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'tsb_emitter',
        sa.Column('topology', sa.String(length=250), nullable=False),
        sa.Column('owner', sa.String(length=500), nullable=False),
        sa.Column('started_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('heartbeat_ms', sa.BigInteger(), nullable=False),
        sa.Column('lease_until_ms', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('topology', name=op.f('pk_tsb_emitter')),
    )


def downgrade() -> None:
    op.drop_table('tsb_emitter')
