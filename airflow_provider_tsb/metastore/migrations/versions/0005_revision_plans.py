"""revision plans: tsb_revision and tsb_revision_table (atomic, resumable rollbacks)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 13:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'tsb_revision',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('topology', sa.String(length=250), nullable=False),
        sa.Column('table_name', sa.String(length=400), nullable=False),
        sa.Column('barrier_id', sa.BigInteger(), nullable=False),
        sa.Column('reprocess', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('finished_at_ms', sa.BigInteger(), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(['topology'], ['tsb_topology.name'], name=op.f('fk_tsb_revision_topology_tsb_topology')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tsb_revision')),
    )
    op.create_index('ix_tsb_revision_topology_status', 'tsb_revision', ['topology', 'status'], unique=False)
    op.create_table(
        'tsb_revision_table',
        sa.Column('revision_id', sa.Integer(), nullable=False),
        sa.Column('table_id', sa.Integer(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('target_version', sa.BigInteger(), nullable=True),
        sa.Column('job_id', sa.String(length=250), nullable=True),
        sa.Column('checkpoint', sa.Text(), nullable=True),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('restored_version', sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ['revision_id'], ['tsb_revision.id'], name=op.f('fk_tsb_revision_table_revision_id_tsb_revision'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_revision_table_table_id_tsb_table')),
        sa.PrimaryKeyConstraint('revision_id', 'table_id', name=op.f('pk_tsb_revision_table')),
    )
    op.create_index(op.f('ix_tsb_revision_table_table_id'), 'tsb_revision_table', ['table_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_tsb_revision_table_table_id'), table_name='tsb_revision_table')
    op.drop_table('tsb_revision_table')
    op.drop_index('ix_tsb_revision_topology_status', table_name='tsb_revision')
    op.drop_table('tsb_revision')
