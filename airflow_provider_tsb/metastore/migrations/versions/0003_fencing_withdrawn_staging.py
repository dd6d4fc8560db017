"""fencing token per job; withdrawn staged attempts (deleted after a grace period)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 12:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tsb_job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fencing_token', sa.BigInteger(), nullable=False, server_default='0'))
    op.create_table(
        'tsb_withdrawn_staging',
        sa.Column('table_id', sa.Integer(), nullable=False),
        sa.Column('path', sa.String(length=700), nullable=False),
        sa.Column('barrier_id', sa.BigInteger(), nullable=False),
        sa.Column('job_id', sa.String(length=250), nullable=True),
        sa.Column('withdrawn_at_ms', sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_withdrawn_staging_table_id_tsb_table')
        ),
        sa.PrimaryKeyConstraint('table_id', 'path', name=op.f('pk_tsb_withdrawn_staging')),
    )
    op.create_index(
        op.f('ix_tsb_withdrawn_staging_withdrawn_at_ms'), 'tsb_withdrawn_staging', ['withdrawn_at_ms'], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f('ix_tsb_withdrawn_staging_withdrawn_at_ms'), table_name='tsb_withdrawn_staging')
    op.drop_table('tsb_withdrawn_staging')
    with op.batch_alter_table('tsb_job', schema=None) as batch_op:
        batch_op.drop_column('fencing_token')
