"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 08:16:10.572271
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('tsb_lease',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('holder', sa.String(length=250), nullable=True),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('expires_at_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tsb_lease'))
    )
    with op.batch_alter_table('tsb_lease', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tsb_lease_expires_at_ms'), ['expires_at_ms'], unique=False)

    op.create_table('tsb_registry_lock',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tsb_registry_lock'))
    )
    op.create_table('tsb_topology',
    sa.Column('name', sa.String(length=250), nullable=False),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('lock_version', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_tsb_topology'))
    )
    op.create_table('tsb_barrier',
    sa.Column('topology', sa.String(length=250), nullable=False),
    sa.Column('barrier_id', sa.BigInteger(), nullable=False),
    sa.Column('ts_ms', sa.BigInteger(), nullable=False),
    sa.Column('ts_kind', sa.String(length=10), nullable=False),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('run_key', sa.String(length=250), nullable=True),
    sa.ForeignKeyConstraint(['topology'], ['tsb_topology.name'], name=op.f('fk_tsb_barrier_topology_tsb_topology')),
    sa.PrimaryKeyConstraint('topology', 'barrier_id', name=op.f('pk_tsb_barrier')),
    sa.UniqueConstraint('topology', 'run_key', name=op.f('uq_tsb_barrier_topology_run_key'))
    )
    op.create_table('tsb_job',
    sa.Column('id', sa.String(length=250), nullable=False),
    sa.Column('topology', sa.String(length=250), nullable=False),
    sa.Column('application', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('registered_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('last_heartbeat_ms', sa.BigInteger(), nullable=True),
    sa.Column('current_barrier', sa.BigInteger(), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['topology'], ['tsb_topology.name'], name=op.f('fk_tsb_job_topology_tsb_topology')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tsb_job'))
    )
    with op.batch_alter_table('tsb_job', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tsb_job_topology'), ['topology'], unique=False)

    op.create_table('tsb_table',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=400), nullable=False),
    sa.Column('topology', sa.String(length=250), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('location', sa.Text(), nullable=False),
    sa.Column('event_time_column', sa.String(length=250), nullable=True),
    sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['topology'], ['tsb_topology.name'], name=op.f('fk_tsb_table_topology_tsb_topology')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tsb_table')),
    sa.UniqueConstraint('name', name=op.f('uq_tsb_table_name'))
    )
    with op.batch_alter_table('tsb_table', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tsb_table_topology'), ['topology'], unique=False)

    op.create_table('tsb_job_barrier',
    sa.Column('job_id', sa.String(length=250), nullable=False),
    sa.Column('barrier_id', sa.BigInteger(), nullable=False),
    sa.Column('started_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('finished_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['tsb_job.id'], name=op.f('fk_tsb_job_barrier_job_id_tsb_job'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'barrier_id', name=op.f('pk_tsb_job_barrier'))
    )
    op.create_table('tsb_job_sink',
    sa.Column('job_id', sa.String(length=250), nullable=False),
    sa.Column('table_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['tsb_job.id'], name=op.f('fk_tsb_job_sink_job_id_tsb_job'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_job_sink_table_id_tsb_table')),
    sa.PrimaryKeyConstraint('job_id', 'table_id', name=op.f('pk_tsb_job_sink')),
    sa.UniqueConstraint('table_id', name=op.f('uq_tsb_job_sink_table_id'))
    )
    op.create_table('tsb_job_source',
    sa.Column('job_id', sa.String(length=250), nullable=False),
    sa.Column('table_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['tsb_job.id'], name=op.f('fk_tsb_job_source_job_id_tsb_job'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_job_source_table_id_tsb_table')),
    sa.PrimaryKeyConstraint('job_id', 'table_id', name=op.f('pk_tsb_job_source'))
    )
    with op.batch_alter_table('tsb_job_source', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tsb_job_source_table_id'), ['table_id'], unique=False)

    op.create_table('tsb_lease_version',
    sa.Column('lease_id', sa.String(length=36), nullable=False),
    sa.Column('table_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['lease_id'], ['tsb_lease.id'], name=op.f('fk_tsb_lease_version_lease_id_tsb_lease'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_lease_version_table_id_tsb_table')),
    sa.PrimaryKeyConstraint('lease_id', 'table_id', name=op.f('pk_tsb_lease_version'))
    )
    with op.batch_alter_table('tsb_lease_version', schema=None) as batch_op:
        batch_op.create_index('ix_tsb_lease_version_table', ['table_id', 'version'], unique=False)

    op.create_table('tsb_table_barrier',
    sa.Column('table_id', sa.Integer(), nullable=False),
    sa.Column('barrier_id', sa.BigInteger(), nullable=False),
    sa.Column('state', sa.String(length=10), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=True),
    sa.Column('job_id', sa.String(length=250), nullable=True),
    sa.Column('processed_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('written_at_ms', sa.BigInteger(), nullable=True),
    sa.Column('manifest', sa.JSON(), nullable=True),
    sa.Column('inputs', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_table_barrier_table_id_tsb_table')),
    sa.PrimaryKeyConstraint('table_id', 'barrier_id', name=op.f('pk_tsb_table_barrier'))
    )
    with op.batch_alter_table('tsb_table_barrier', schema=None) as batch_op:
        batch_op.create_index('ix_tsb_table_barrier_state', ['table_id', 'state', 'barrier_id'], unique=False)
        batch_op.create_index('ix_tsb_table_barrier_version', ['table_id', 'version'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('tsb_table_barrier', schema=None) as batch_op:
        batch_op.drop_index('ix_tsb_table_barrier_version')
        batch_op.drop_index('ix_tsb_table_barrier_state')

    op.drop_table('tsb_table_barrier')
    with op.batch_alter_table('tsb_lease_version', schema=None) as batch_op:
        batch_op.drop_index('ix_tsb_lease_version_table')

    op.drop_table('tsb_lease_version')
    with op.batch_alter_table('tsb_job_source', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tsb_job_source_table_id'))

    op.drop_table('tsb_job_source')
    op.drop_table('tsb_job_sink')
    op.drop_table('tsb_job_barrier')
    with op.batch_alter_table('tsb_table', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tsb_table_topology'))

    op.drop_table('tsb_table')
    with op.batch_alter_table('tsb_job', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tsb_job_topology'))

    op.drop_table('tsb_job')
    op.drop_table('tsb_barrier')
    op.drop_table('tsb_topology')
    op.drop_table('tsb_registry_lock')
    with op.batch_alter_table('tsb_lease', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tsb_lease_expires_at_ms'))

    op.drop_table('tsb_lease')
